"""Security stories of the data plane (issue 27, items 2-4), against the real server and real PNodes.

The attacker is a PNode that joined by invite: a valid `pnode` credential, in no session's plan. It
learns a session's placement and tries what once worked: frames carrying a producer's activation to
its consumer, a gigabyte claimed in one small frame, chunk 0 of upcoming tensors sent ahead under
their keys. It tries each under every subject it might: as itself, as the producer, and on the one
subject every PNode could publish to before senders were named (`<prefix>.pn.<dst>.tensor`). The
server refuses the last two; the receiver refuses the first, for a reason its log names; the
session's losses stay a clean run's, bit for bit."""

from __future__ import annotations

import asyncio
import time

import psutil
import pytest
import torch

from computeall.cli.follow import follow_session, start_session
from computeall.cli.session_view import session_events
from computeall.network import Graph, load_network
from computeall.pnode.routing import TensorRoute
from computeall.protocol import bus, wire
from computeall.protocol.events import Allocated
from computeall.protocol.subjects import Subjects
from computeall.tensorcore.tensor_frames import tensor_frames

from .cluster import running_cluster, wait_for_pnodes
from .sessions import config, losses, run_to_end
from .test_security_stories import Refusals
from .test_training_run import NETWORK
from .waiting import wait_until_async

pytestmark = pytest.mark.timeout(600)

S = Subjects()
GRAPH = Graph(load_network(NETWORK.read_text()))
ROGUE = "pnode-rogue"
STEPS = 10
SESSION_TIMEOUT_S = 240  # a clean session takes seconds; without the fix, a squatted one never ends


def session_config():
    return config(steps=STEPS, checkpoint_every=0, batch_size=8, micro_batches=2)


def unnamed_subject(consumer: str) -> str:
    """The one subject every PNode could publish a consumer's tensors to before senders were named."""
    return f"{S.prefix}.pn.{consumer}.tensor"


class Rogue:
    """An invited PNode attacking another user's session."""

    def __init__(self) -> None:
        self.refusals = Refusals()  # what the server would not let it do
        self.nc = None

    async def join(self, supervisor) -> Rogue:
        self.nc = await bus.connect(supervisor.credentials.credential("pnode", ROGUE), name="test-rogue",
                                    error_cb=self.refusals.record)
        return self

    async def send(self, consumer: str, producer: str, frames: list[bytes]) -> None:
        """As itself, as the producer, and on the unnamed subject."""
        for subject in (S.pnode_tensor(consumer, ROGUE), S.pnode_tensor(consumer, producer), unnamed_subject(consumer)):
            for frame in frames:
                await self.nc.publish(subject, frame)
        await self.nc.flush()

    async def was_refused_all_but_its_own(self, consumer: str, producer: str) -> None:
        """The server refused it the producer's subject and the unnamed one (its own it may use)."""
        for subject in (S.pnode_tensor(consumer, producer), unnamed_subject(consumer)):
            await self.refusals.saw("permissions violation for publish", f'"{subject}"')

    async def close(self) -> None:
        await self.nc.close()


async def placement(client, sid: str) -> dict[str, str]:
    """VNode -> PNode of the session's first allocation, once it is recorded."""
    async def allocated():
        for _, event in await session_events(client, sid):
            if isinstance(event.payload, Allocated):
                return {p.vnode: p.pnode for p in event.payload.placements}
        return None

    return await wait_until_async(allocated, 60, f"session {sid} being allocated", interval=0.05)


def crossing(assignment: dict[str, str]) -> list[tuple[str, str, str]]:
    """(VNode, its PNode, a PNode consuming its output) for every activation that crosses PNodes."""
    return sorted({(src, assignment[src], assignment[v]) for v in GRAPH.order for src in GRAPH.vnodes[v].inputs
                   if src in assignment and assignment[src] != assignment[v]})


def activation(sid: str, step: int, micro: int, src: str) -> TensorRoute:
    return TensorRoute.activation(sid, "train", step, micro, src)


def activation_shape(cfg) -> list[int]:
    return [cfg.micro_batch_size, GRAPH.spec.context, GRAPH.out_features["embed"]]


async def attacked_run(client, supervisor, cfg, attack) -> tuple[list[tuple[int, float]], dict[str, str]]:
    """Run a session while `attack(rogue, sid, assignment)` runs beside it; its losses and placement."""
    rogue = await Rogue().join(supervisor)
    sid, command_id = await start_session(client, cfg)
    assignment = await placement(client, sid)
    attacking = asyncio.ensure_future(attack(rogue, sid, assignment))
    try:
        outcome = await asyncio.wait_for(follow_session(client, sid, cfg.steps, progress=False, command_id=command_id),
                                         SESSION_TIMEOUT_S)
        assert outcome.ok, outcome.message
        if attacking.done():
            attacking.result()  # an attack that failed to run proves nothing
    finally:
        attacking.cancel()
    for _, producer, consumer in crossing(assignment):
        await rogue.was_refused_all_but_its_own(consumer, producer)
    await rogue.close()
    return await losses(client, sid), assignment


def refused_in_log(tmp_path, pnode: str) -> bool:
    """The PNode's log names a frame from the rogue it refused for not being from the producer."""
    return f"not from {ROGUE}" in (tmp_path / "logs" / f"{pnode}.log").read_text()


async def test_a_pnode_forging_a_producers_frames_changes_no_loss(tmp_path):
    cfg = session_config()
    async with running_cluster(tmp_path, pnodes=2) as (client, supervisor):
        await wait_for_pnodes(supervisor, ["pnode-0", "pnode-1"])
        clean = await losses(client, await run_to_end(client, cfg))

        async def forge(rogue: Rogue, sid: str, assignment: dict[str, str]) -> None:
            """The right shape and dtype, other values, for every step and micro-batch, again and again."""
            forged = torch.full(activation_shape(cfg), 3.0)
            while True:
                for src, producer, consumer in crossing(assignment):
                    for step in range(STEPS):
                        for micro in range(cfg.micro_batches):
                            route = activation(sid, step, micro, src)
                            await rogue.send(consumer, producer, tensor_frames(route.wire_key, forged, 1 << 20,
                                                                               route.wire_meta()))
                await asyncio.sleep(0.05)

        attacked, assignment = await attacked_run(client, supervisor, cfg, forge)
    assert [step for step, _ in attacked] == list(range(STEPS))
    assert attacked == clean, "the forged frames changed the losses"
    assert all(refused_in_log(tmp_path, consumer) for _, _, consumer in crossing(assignment))


async def test_a_gigabyte_claimed_in_one_small_frame_takes_no_memory_of_the_victim(tmp_path):
    cfg = session_config().model_copy(update={"steps": 400})  # still training when the claim comes
    async with running_cluster(tmp_path, pnodes=2) as (client, supervisor):
        await wait_for_pnodes(supervisor, ["pnode-0", "pnode-1"])
        sid, _ = await start_session(client, cfg)
        src, producer, victim = crossing(await placement(client, sid))[0]
        await wait_until_async(lambda: _steps_done(client, sid, 3), 120, "three steps done")
        route = activation(sid, cfg.steps - 1, 0, src)  # a step to come
        claim = wire.TensorHeader(key=route.wire_key, dtype="uint8", shape=[1 << 30], chunk=0, chunks=2, offset=0,
                                  total_bytes=1 << 30, digest="0" * 32, meta=route.wire_meta())
        header = claim.model_dump_json().encode()
        frame = wire.MAGIC + len(header).to_bytes(4, "little") + header + bytes(4096)  # 4 KB on the wire
        process = psutil.Process(supervisor.services[victim].process.pid)
        before = process.memory_info().rss
        rogue = await Rogue().join(supervisor)
        await rogue.send(victim, producer, [frame])
        grown, deadline = 0, time.monotonic() + 5
        while time.monotonic() < deadline:
            grown = max(grown, process.memory_info().rss - before)
            await asyncio.sleep(0.1)
        await rogue.was_refused_all_but_its_own(victim, producer)
        await rogue.close()
        assert len(await losses(client, sid)) < cfg.steps, "the victim was training all along"
    assert grown < 64 << 20, f"the victim's memory grew by {grown >> 20} MiB"
    assert refused_in_log(tmp_path, victim)


async def _steps_done(client, sid: str, count: int) -> bool:
    return len(await losses(client, sid)) >= count


async def test_chunks_sent_ahead_under_upcoming_keys_do_not_stall_the_session(tmp_path):
    cfg = session_config()
    size = wire.encoded_bytes("raw", "float32", activation_shape(cfg))
    half = wire.MAX_HEADER_BYTES + 8 + size // 2 + 1  # chunk 0 of 2

    async with running_cluster(tmp_path, pnodes=2) as (client, supervisor):
        await wait_for_pnodes(supervisor, ["pnode-0", "pnode-1"])
        clean = await losses(client, await run_to_end(client, cfg))

        async def squat(rogue: Rogue, sid: str, assignment: dict[str, str]) -> None:
            for src, producer, consumer in crossing(assignment):
                for step in range(STEPS):
                    for micro in range(cfg.micro_batches):
                        route = activation(sid, step, micro, src)
                        frames = tensor_frames(route.wire_key, torch.zeros(activation_shape(cfg)), half, route.wire_meta())
                        assert len(frames) == 2
                        await rogue.send(consumer, producer, frames[:1])

        attacked, _ = await attacked_run(client, supervisor, cfg, squat)
    assert attacked == clean, "the squatted keys changed the losses"
