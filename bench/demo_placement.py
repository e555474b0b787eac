"""How `make demo` uses its 3 PNodes: the placement its session gets (tiny-gpt with the Makefile's
`DEMO_TRAINING`, through the CLI's own flags) and each PNode's share of a step spent waiting for its
inputs (its `StepTiming` telemetry, the dashboard's time shares), against half a step: the demo's
promise is that no PNode waits more than that. A standby takes no part in a step and has no row.

    python -m bench.demo_placement [--quick] [--json PATH] [--micro-batches M] [--stages N|auto]

`--micro-batches` and `--stages` replace the demo's settings, to compare (`--micro-batches 1 --stages 3`
is the placement the demo had before the allocator chose its stages by its estimate).
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
import tempfile
from pathlib import Path

from computeall.cli.commands.run import add_training_args, session_config
from computeall.cli.embedded import running_cluster
from computeall.cli.session_view import session_events
from computeall.protocol.config import DataConfig, SessionConfig
from computeall.protocol.events import Allocated

from .common import REPO, Bench, at_most
from .sessions import run_to_end, small_corpus, step_timings, time_shares

PNODES = 3  # `make demo`'s `up --pnodes 3`
WARMUP = 2  # steps left out: the first ones warm caches and allocators


def demo_config(steps: int, *flags: str) -> SessionConfig:
    """The session `make demo` creates (`up --pnodes 3 --train tiny-gpt` with the Makefile's DEMO_TRAINING,
    then `flags`, through the CLI's own parser), `steps` long, on a smaller corpus."""
    demo = re.search(r"^DEMO_TRAINING := (.*)$", (REPO / "Makefile").read_text(), re.MULTILINE).group(1).split()
    parser = argparse.ArgumentParser()
    parser.add_argument("--network")
    add_training_args(parser)
    network = REPO / "examples" / "networks" / "tiny-gpt.yaml"
    args = parser.parse_args(["--network", str(network), "--steps", str(steps), "--dataset", "unused", *demo, *flags])
    return session_config(args, min_pnodes=PNODES).model_copy(update={"data": DataConfig(files=small_corpus())})


def placed(allocated: Allocated) -> str:
    stages = len(allocated.pnodes) // allocated.replicas
    standbys = f", {len(allocated.standbys)} standing by" if allocated.standbys else ""
    return f"{allocated.replicas} replica(s) of {stages} stage(s){standbys}"


async def measure(bench: Bench, config: SessionConfig) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        async with running_cluster(Path(tmp), PNODES) as (client, supervisor):
            sid = await run_to_end(client, config)
            allocated = next(e.payload for _, e in await session_events(client, sid) if isinstance(e.payload, Allocated))
            timings = await step_timings(supervisor, sid, config.steps - 1)
    name = f"tiny-gpt on {PNODES} PNodes, {config.micro_batches} micro-batch(es), {placed(allocated)}"
    for pnode, share in time_shares(timings, WARMUP).items():
        bench.row(f"{name}: {pnode} waiting", "of a step", share["wait"], "half a step", 0.5, at_most(1.0))


def main() -> int:
    bench = Bench("demo_placement", __doc__, quick_help="fewer steps")
    bench.parser.add_argument("--micro-batches", default=None, help="instead of the demo's")
    bench.parser.add_argument("--stages", default=None, help="instead of auto: N stages")
    args = bench.parse()
    flags = [*(["--micro-batches", args.micro_batches] if args.micro_batches else []),
             *(["--stages", args.stages] if args.stages else [])]
    asyncio.run(measure(bench, demo_config(8 if args.quick else 20, *flags)))
    return bench.finish()


if __name__ == "__main__":
    sys.exit(main())
