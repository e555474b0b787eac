"""What samples while training cost the training: `computeall run` with `--sample-every` against the same run without.

The anchor is the same network, data, seed and PNodes without samples, run alternately with the
sampled one (the machine is shared and noisy). Samples are written by one PNode on a thread beside
its compute, from a checkpoint the orchestrator commits at each sampled step, so the figures are the
training's step time (the wall time between recorded steps, as `ts` in the metrics lines) and the
whole run's wall time (which includes those checkpoints), as ratios sampled / plain (1.0: free).

    python -m bench.samples [--quick] [--json PATH] [--network PATH] [--pnodes N]
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .common import REPO, Bench, at_most
from .sessions import corpus


def run(network: Path, steps: int, pnodes: int, sample_args: list[str]) -> tuple[float, list[float]]:
    """(wall seconds of the whole command, the seconds from each recorded step to the next)."""
    with tempfile.TemporaryDirectory() as tmp:
        metrics = Path(tmp) / "m.jsonl"
        cmd = [str(Path(sys.executable).parent / "computeall"), "run", str(network), "--data", *corpus(),
               "--steps", str(steps), "--pnodes", str(pnodes), "--stages", str(pnodes), "--seed", "1", "--metrics-out", str(metrics),
               "--no-progress", *sample_args]
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True, timeout=1800)
        wall = time.perf_counter() - t0
        recorded = [json.loads(line)["ts"] for line in metrics.read_text().splitlines()]
        return wall, [b - a for a, b in zip(recorded, recorded[1:])]


def main() -> int:
    bench = Bench("samples", __doc__, quick_help="fewer steps and repeats")
    bench.parser.add_argument("--network", type=Path, default=REPO / "examples" / "networks" / "micro-gpt.yaml")
    bench.parser.add_argument("--pnodes", type=int, default=2)
    args = bench.parse()
    steps, every, repeats = (12, 4, 1) if args.quick else (40, 5, 3)
    sampled_args = ["--sample-every", str(every), "--sample-prompt", "def ", "--sample-prompt", "class ",
                    "--sample-tokens", "48"]
    walls: dict[str, list[float]] = {"plain": [], "sampled": []}
    step_times: dict[str, list[float]] = {"plain": [], "sampled": []}
    for _ in range(repeats):
        for name, extra in (("plain", []), ("sampled", sampled_args)):
            wall, times = run(args.network, steps, args.pnodes, extra)
            walls[name].append(wall)
            step_times[name] += times[1:]  # the first interval warms up
    name = f"{args.network.stem} on {args.pnodes} PNodes, samples every {every} of {steps} steps (2 prompts x 48 tokens)"
    # samples come from a thread beside the compute: a step may slow by a tenth at most
    bench.row(f"{name}: step", "s", statistics.median(step_times["sampled"]), "the same run without samples",
              statistics.median(step_times["plain"]), at_most(1.1))
    bench.row(f"{name}: the whole run", "s", statistics.median(walls["sampled"]), "the same run without samples",
              statistics.median(walls["plain"]))
    return bench.finish()


if __name__ == "__main__":
    sys.exit(main())
