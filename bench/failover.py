"""Failover cost: time from `kill -9` of a PNode to the first new step, split into detection,
reallocation, state reload and re-run; steps re-run against the checkpoint interval; and the
overhead of checkpointing every N steps on the time per step (against no checkpoints).

    python bench/failover.py [--quick] [--json PATH] [--network examples/networks/tiny-gpt.yaml]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from computeall.cli.embedded import running_cluster  # noqa: E402
from computeall.cli.follow import start_session  # noqa: E402
from computeall.cli.session_view import session_events  # noqa: E402
from computeall.protocol.config import DataConfig, SessionConfig  # noqa: E402
from tests.integration.cluster import stdlib_corpus  # noqa: E402
from tests.integration.sessions import run_to_end, wait_for  # noqa: E402


def session(network: Path, steps: int, checkpoint_every: int) -> SessionConfig:
    return SessionConfig(network_yaml=network.read_text(), data=DataConfig(files=stdlib_corpus()), steps=steps, seed=1,
                         checkpoint_every=checkpoint_every, min_pnodes=3,
                         pipeline={"stages": 3})


async def seconds_per_step(client, network: Path, steps: int, checkpoint_every: int) -> float:
    sid = await run_to_end(client, session(network, steps, checkpoint_every))
    events = [e for _, e in await session_events(client, sid)]
    started = next(e.ts for e in events if e.type == "SessionClaimed")
    ended = next(e.ts for e in events if e.type == "SessionCompleted")
    return (ended - started) / steps


async def failover(client, supervisor, network: Path, steps: int, interval: int) -> dict:
    sid, _ = await start_session(client, session(network, steps, interval))
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


async def main(args: argparse.Namespace) -> dict:
    steps = 20 if args.quick else 60
    with tempfile.TemporaryDirectory() as tmp:
        async with running_cluster(Path(tmp), pnodes=3) as (client, supervisor):
            await seconds_per_step(client, args.network, 3, 0)  # warm-up: dataset, imports
            plain = await seconds_per_step(client, args.network, steps, 0)
            every = {n: await seconds_per_step(client, args.network, steps, n) for n in (1, 5)}
            recovery = await failover(client, supervisor, args.network, steps, 5)
    return {
        "network": args.network.name,
        "seconds_per_step_no_checkpoints": plain,
        "checkpoint_overhead": {f"every_{n}": {"seconds_per_step": s, "ratio": s / plain} for n, s in every.items()},
        "failover": recovery,
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--network", type=Path, default=REPO / "examples" / "networks" / "micro-gpt.yaml")
    parser.add_argument("--json", type=Path, default=REPO / "bench" / "results" / "failover.json")
    args = parser.parse_args()
    result = asyncio.run(main(args))
    f = result["failover"]
    print(f"{result['network']}: {result['seconds_per_step_no_checkpoints']:.3f} s/step without checkpoints")
    for name, row in result["checkpoint_overhead"].items():
        print(f"  checkpoint {name.replace('_', ' ')} steps: {row['seconds_per_step']:.3f} s/step, ratio {row['ratio']:.2f}")
    print(f"kill -> first new step {f['kill_to_first_new_step_s']:.2f}s = detection {f['detection_s']:.2f}s + "
          f"reallocation {f['reallocation_s']:.2f}s + state reload {f['state_reload_s']:.2f}s + re-run {f['rerun_s']:.2f}s; "
          f"{f['steps_rerun']} steps re-run with a checkpoint every {f['checkpoint_interval']}")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=1) + "\n")
