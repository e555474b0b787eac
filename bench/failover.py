"""Failover cost: time from `kill -9` of a PNode to the first new step against the heartbeat timeout
(the silence after which a PNode is declared lost: no recovery can be quicker), with its parts
(detection, reallocation, state reload, re-run) each against one step; steps re-run against the
checkpoint interval; and the time per step with a checkpoint every N steps against none.

    python -m bench.failover [--quick] [--json PATH] [--network examples/networks/micro-gpt.yaml]
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from pathlib import Path

from computeall.cli.embedded import running_cluster
from computeall.cli.follow import start_session
from computeall.cli.session_view import session_events
from computeall.protocol.config import DataConfig, SessionConfig
from computeall.protocol.telemetry import HEARTBEAT_TIMEOUT_S

from .common import REPO, Bench, at_most
from .sessions import run_to_end, small_corpus, wait_for


def session(network: Path, steps: int, checkpoint_every: int) -> SessionConfig:
    return SessionConfig(network_yaml=network.read_text(), data=DataConfig(files=small_corpus()), steps=steps, seed=1,
                         checkpoint_every=checkpoint_every, min_pnodes=3, pipeline={"stages": 3})


async def seconds_per_step(client, network: Path, steps: int, checkpoint_every: int) -> float:
    sid = await run_to_end(client, session(network, steps, checkpoint_every))
    events = [e for _, e in await session_events(client, sid)]
    started = next(e.ts for e in events if e.type == "SessionClaimed")
    ended = next(e.ts for e in events if e.type == "SessionCompleted")
    return (ended - started) / steps


async def failover(client, supervisor, network: Path, steps: int, interval: int) -> dict:
    sid, _ = await start_session(client, session(network, steps, interval))  # the stdlib is read where it is
    await wait_for(client, sid, lambda s: s.next_step >= interval + interval // 2 + 1, timeout=600)
    killed_at = time.time()
    supervisor.services.pop("pnode-1").process.kill()  # kill -9, and no restart
    await wait_for(client, sid, lambda s: s.status == "completed", timeout=900)
    events = [e for _, e in await session_events(client, sid)]
    lost = next(e for e in events if e.type == "PNodeLost")
    realloc = next(e for e in events if e.type == "Reallocated")
    rolled = next(e for e in events if e.type == "RolledBack")
    first_new = next(e for e in events if e.type == "StepCompleted" and e.ts > rolled.ts)
    return {
        "detection_s": lost.ts - killed_at,
        "reallocation_s": realloc.ts - lost.ts,
        "state_reload_s": rolled.ts - realloc.ts,
        "rerun_s": first_new.ts - rolled.ts,
        "kill_to_first_new_step_s": first_new.ts - killed_at,
        "steps_rerun": rolled.payload.from_step - rolled.payload.to_step,
        "checkpoint_interval": interval,
    }


async def measure(bench: Bench, network: Path, quick: bool) -> None:
    steps = 20 if quick else 60
    with tempfile.TemporaryDirectory() as tmp:
        async with running_cluster(Path(tmp), pnodes=3) as (client, supervisor):
            await seconds_per_step(client, network, 3, 0)  # warm-up: dataset, imports
            plain = await seconds_per_step(client, network, steps, 0)
            every = {n: await seconds_per_step(client, network, steps, n) for n in (1, 5)}
            f = await failover(client, supervisor, network, steps, 5)
    name = f"{network.stem} on 3 PNodes"
    for n, s in every.items():
        bench.row(f"{name}, a checkpoint every {n} step(s)", "s/step", s, "no checkpoints", plain,
                  at_most(1.1) if n == 5 else None)
    killed = f"{name}, pnode-1 killed -9"
    bench.row(f"{killed}: kill to the first new step", "s", f["kill_to_first_new_step_s"],
              f"the heartbeat timeout ({HEARTBEAT_TIMEOUT_S:g} s)", HEARTBEAT_TIMEOUT_S, at_most(3.0))
    for part in ("detection", "reallocation", "state_reload", "rerun"):
        bench.row(f"{killed}: {part.replace('_', ' ')}", "s", f[f"{part}_s"], "one step without checkpoints", plain)
    bench.row(f"{killed}: steps re-run", "steps", f["steps_rerun"], "the checkpoint interval", f["checkpoint_interval"],
              at_most(1.0))


def main() -> int:
    bench = Bench("failover", __doc__)
    bench.parser.add_argument("--network", type=Path, default=REPO / "examples" / "networks" / "micro-gpt.yaml")
    args = bench.parse()
    asyncio.run(measure(bench, args.network, args.quick))
    return bench.finish()


if __name__ == "__main__":
    sys.exit(main())
