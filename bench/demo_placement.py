"""How `make demo` uses its 3 PNodes: the placement the allocator chose, and the share of each step
every PNode spent computing, sending and waiting (its `StepTiming` telemetry, as the dashboard
shows it). The demo's promise: no PNode waits more than half of a step.

    python bench/demo_placement.py [--quick] [--micro-batches M] [--replicas N|auto] [--stages N|auto] [--json PATH]

The session is the demo's (the Makefile's `DEMO_TRAINING`, through the CLI's flags); the options
replace its settings, to compare.
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

from computeall.cli.embedded import running_cluster  # noqa: E402
from computeall.cli.session_view import session_events  # noqa: E402
from computeall.protocol.config import SessionConfig  # noqa: E402
from computeall.protocol.events import Allocated, StepCompleted  # noqa: E402
from tests.integration.sessions import run_to_end, step_timings, time_shares  # noqa: E402
from tests.integration.test_placement import demo_config  # noqa: E402

PNODES = 3
WARMUP = 2  # steps left out: the first ones warm caches and allocators


async def measure(config: SessionConfig) -> dict:
    steps = config.steps
    with tempfile.TemporaryDirectory() as tmp:
        async with running_cluster(Path(tmp), PNODES) as (client, supervisor):
            sid = await run_to_end(client, config, timeout=3600)
            payloads = [e.payload for _, e in await session_events(client, sid)]
            timings = await step_timings(supervisor, sid, steps - 1)
    allocated = next(p for p in payloads if isinstance(p, Allocated))
    done = [p for p in payloads if isinstance(p, StepCompleted)][WARMUP:]
    shares = time_shares(timings, WARMUP)
    stages = {}
    for p in allocated.placements:
        stages.setdefault(f"replica {p.replica}", {}).setdefault(p.pnode, []).append(p.vnode)
    return {
        "micro_batches": config.micro_batches, "replicas": allocated.replicas, "stages": stages,
        "standbys": allocated.standbys, "estimated_step_s": allocated.estimated_step_s,
        "median_step_s": statistics.median(p.step_time_s for p in done), "time_shares": shares,
        "most_waiting": max((s["wait"] for s in shares.values()), default=None),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer steps")
    parser.add_argument("--micro-batches", type=int, default=None)
    parser.add_argument("--replicas", default=None)
    parser.add_argument("--stages", default=None)
    parser.add_argument("--json", type=Path, default=REPO / "bench" / "results" / "demo_placement.json")
    args = parser.parse_args()
    config = demo_config(6 if args.quick else 20)
    changes = {"micro_batches": args.micro_batches,
               "replicas": args.replicas if args.replicas in (None, "auto") else int(args.replicas),
               "pipeline": None if args.stages is None else config.pipeline.model_copy(
                   update={"stages": args.stages if args.stages == "auto" else int(args.stages)})}
    config = SessionConfig.model_validate({**config.model_dump(), **{k: v for k, v in changes.items() if v is not None}})
    row = asyncio.run(measure(config))
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
