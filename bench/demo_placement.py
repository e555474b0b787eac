"""How `make demo` uses its 3 PNodes: the placement the allocator chose, and the share of each step
every PNode spent computing, sending and waiting (its `StepTiming` telemetry, as the dashboard
shows it). The demo's promise: no PNode waits more than half of a step.

    python bench/demo_placement.py [--quick] [--micro-batches 8] [--replicas 1] [--json PATH]

The defaults are the demo's (Makefile `DEMO_TRAINING`); try others to compare.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from pydantic import TypeAdapter  # noqa: E402

from computeall.cli.client import connect  # noqa: E402
from computeall.cli.embedded import running_cluster  # noqa: E402
from computeall.cli.session_view import session_events  # noqa: E402
from computeall.protocol.config import DataConfig, SessionConfig  # noqa: E402
from computeall.protocol.eventlog import EventLog  # noqa: E402
from computeall.protocol.events import Allocated, StepCompleted  # noqa: E402
from computeall.protocol.subjects import TEL_STREAM  # noqa: E402
from computeall.protocol.telemetry import StepTiming, Telemetry  # noqa: E402
from tests.integration.cluster import stdlib_corpus  # noqa: E402
from tests.integration.sessions import run_to_end  # noqa: E402

PNODES = 3
NETWORK = REPO / "examples" / "networks" / "tiny-gpt.yaml"
WARMUP = 2  # steps left out: the first ones warm caches and allocators
TELEMETRY = TypeAdapter(Telemetry)


def demo_config(steps: int, micro_batches: int, replicas: int | str) -> SessionConfig:
    """The demo's session (`computeall up --train` with the Makefile's flags), `steps` long."""
    return SessionConfig(network_yaml=NETWORK.read_text(), data=DataConfig(files=stdlib_corpus()), steps=steps,
                         batch_size=8, micro_batches=micro_batches, replicas=replicas, min_pnodes=PNODES)


async def step_timings(supervisor, sid: str, last_step: int) -> list[StepTiming]:
    """The session's StepTimings, read from the telemetry stream as the monitor reads it."""
    async with connect(supervisor.credentials.credential("monitor")) as observer:
        log = EventLog(observer.js, observer.subjects)
        for _ in range(50):
            records = await log.read(observer.subjects.tel_all("step"), stream=TEL_STREAM)
            timings = [t for t in (TELEMETRY.validate_json(r.data) for r in records)
                       if isinstance(t, StepTiming) and t.session_id == sid]
            if any(t.step == last_step for t in timings):
                return timings
            await asyncio.sleep(0.2)
    return timings


async def measure(steps: int, micro_batches: int, replicas: int | str) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        async with running_cluster(Path(tmp), PNODES) as (client, supervisor):
            sid = await run_to_end(client, demo_config(steps, micro_batches, replicas), timeout=3600)
            payloads = [e.payload for _, e in await session_events(client, sid)]
            timings = await step_timings(supervisor, sid, steps - 1)
    allocated = next(p for p in payloads if isinstance(p, Allocated))
    done = [p for p in payloads if isinstance(p, StepCompleted)][WARMUP:]
    shares = {}
    for pnode in sorted({t.pnode for t in timings}):
        mine = [t for t in timings if t.pnode == pnode and t.step >= WARMUP and t.step_s > 0]
        shares[pnode] = {kind: statistics.median(getattr(t, f"{kind}_s") / t.step_s for t in mine)
                         for kind in ("compute", "send", "wait")}
    stages = {}
    for p in allocated.placements:
        stages.setdefault(f"replica {p.replica}", {}).setdefault(p.pnode, []).append(p.vnode)
    return {
        "micro_batches": micro_batches, "replicas": allocated.replicas, "stages": stages,
        "standbys": allocated.standbys, "estimated_step_s": allocated.estimated_step_s,
        "median_step_s": statistics.median(p.step_time_s for p in done), "time_shares": shares,
        "most_waiting": max((s["wait"] for s in shares.values()), default=None),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer steps")
    parser.add_argument("--micro-batches", type=int, default=8)
    parser.add_argument("--replicas", default="1")
    parser.add_argument("--json", type=Path, default=REPO / "bench" / "results" / "demo_placement.json")
    args = parser.parse_args()
    replicas = args.replicas if args.replicas == "auto" else int(args.replicas)
    row = asyncio.run(measure(6 if args.quick else 20, args.micro_batches, replicas))
    for replica, pipeline in row["stages"].items():
        for pnode, vnodes in pipeline.items():
            print(f"{replica}: {pnode} hosts {vnodes[0]} to {vnodes[-1]} ({len(vnodes)} VNodes)")
    print(f"standbys: {', '.join(row['standbys']) or 'none'}; step {row['median_step_s']:.2f} s "
          f"(estimated {row['estimated_step_s']:.2f} s)")
    for pnode, share in row["time_shares"].items():
        print(f"{pnode}: computing {share['compute']:.0%}, sending {share['send']:.0%}, waiting {share['wait']:.0%}")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(row, indent=1) + "\n")
    return 0 if row["most_waiting"] is not None and row["most_waiting"] <= 0.5 else 1


if __name__ == "__main__":
    sys.exit(main())
