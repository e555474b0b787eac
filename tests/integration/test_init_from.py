"""`session create --init-from`: a new session starts from another's checkpoint or from a Hugging Face
export of it, through the orchestrator and the PNodes, and goes on exactly where the source was."""

import asyncio
import json
import subprocess
import sys
from pathlib import Path

from computeall.cli.follow import start_session
from computeall.protocol.config import InitFrom
from computeall.protocol.events import CheckpointCommitted, CommandRejected, InitializedFrom

from .cluster import running_cluster, stdlib_corpus
from .sessions import config, losses, run_to_end, wait_for
from .test_training_run import NETWORK
from computeall.cli.session_view import session_events

COMPUTEALL = Path(sys.executable).parent / "computeall"
SOURCE_STEPS = 5
AT = 4  # the source's checkpoint the new sessions start from


async def _cli(data_dir: Path, *args: str) -> subprocess.CompletedProcess:
    """The CLI of the machine that runs the cluster in `data_dir`: it acts as the local user."""
    return await asyncio.to_thread(
        subprocess.run, [str(COMPUTEALL), *args, "--data-dir", str(data_dir)], capture_output=True, text=True, timeout=180
    )


def _create_args(network: Path, init_from: str, *extra: str) -> list[str]:
    """The source's settings (`sessions.config`), going on with its data after step AT."""
    return ["session", "create", "--network", str(network), "--data", *stdlib_corpus(), "--seed", "3",
            "--steps", "1", "--data-start-step", str(AT), "--init-from", init_from, "--json", *extra]


async def test_init_from_a_checkpoint_and_from_its_export_goes_on_with_the_same_loss(tmp_path):
    source_cfg = config(steps=SOURCE_STEPS, checkpoint_every=AT, min_pnodes=1)
    wider = tmp_path / "wider.yaml"
    wider.write_text(NETWORK.read_text().replace("hidden: 172", "hidden: 180"))
    async with running_cluster(tmp_path / "cluster", pnodes=1) as (client, _):
        here = tmp_path / "cluster"
        source = await run_to_end(client, source_cfg)
        next_loss = dict(await losses(client, source))[AT]  # step AT ran on the checkpoint's weights
        hf = tmp_path / "hf"
        exported = await _cli(here, "export", source, "--step", str(AT), "--format", "hf", str(hf))
        assert exported.returncode == 0, exported.stderr[-2000:]

        started = {}
        for kind, init in (("session", f"{source}@{AT}"), ("hf", str(hf))):
            created = await _cli(here, *_create_args(NETWORK, init))
            assert created.returncode == 0, created.stderr[-2000:]
            started[kind] = json.loads(created.stdout)["session_id"]
        for kind, sid in started.items():
            await wait_for(client, sid, lambda s: s.status == "completed")
            assert await losses(client, sid) == [(0, next_loss)], kind
            events = [e.payload for _, e in await session_events(client, sid)]
            init = next(e for e in events if isinstance(e, InitializedFrom))
            assert (init.session_id, init.step) == ((source, AT) if kind == "session" else (None, None))
            assert "Hugging Face directory" in init.source or kind == "session"
            first = next(e for e in events if isinstance(e, CheckpointCommitted))
            assert first.step == 0  # the session keeps its own start: failover never needs the source

        # a mismatch is refused before anything is created, naming the tensor
        for init, tensor in ((f"{source}@{AT}", "b0.mlp.gate_up.weight"), (str(hf), "model.layers.0.mlp.gate_proj.weight")):
            refused = await _cli(here, *_create_args(wider, init))
            assert refused.returncode == 2 and tensor in refused.stderr and "Traceback" not in refused.stderr, refused.stderr
        for init, message in ((f"{source}@2", "has no checkpoint at step 2; kept steps: 4, 5"),
                              ("nosuch", "has no session nosuch"),
                              (f"{source}@x", "SID@STEP (STEP a number)")):
            refused = await _cli(here, *_create_args(NETWORK, init))
            assert refused.returncode == 2 and message in refused.stderr, refused.stderr

        # the orchestrator refuses what a client without these checks sends
        sid, command_id = await start_session(
            client, source_cfg.model_copy(update={"init_from": InitFrom(session_id=source, step=3)}))
        rejection = await wait_for_rejection(client, sid, command_id)
        assert "keeps no checkpoint at step 3 (kept: 4, 5)" in rejection.reason

        # a dataset with another tokenizer would read the weights' token ids as other words
        other = source_cfg.model_copy(update={
            "data": source_cfg.data.model_copy(update={"files": stdlib_corpus(60_000)}),
            "init_from": InitFrom(session_id=source, step=AT),
        })
        sid, _ = await start_session(client, other)
        failed = await wait_for(client, sid, lambda s: s.status == "failed")
        assert "has another tokenizer than session" in failed.failure and "--tokenizer-from" in failed.failure


async def wait_for_rejection(client, sid: str, command_id: str) -> CommandRejected:
    async def rejected():
        for _, e in await session_events(client, sid):
            if isinstance(e.payload, CommandRejected) and e.payload.command_id == command_id:
                return e.payload
        return None

    from .waiting import wait_until_async

    return await wait_until_async(rejected, 30, "the create to be rejected", interval=0.2)
