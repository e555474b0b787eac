"""What samples while training cost the training: `computeall run` with `--sample-every` against the same run without.

The anchor is the same network, data, seed and PNodes without samples, run alternately with the
sampled one (the machine is shared and noisy). Samples are written by one PNode on a thread beside
its compute, from a checkpoint the orchestrator commits at each sampled step, so the figures are the
training's step time and the whole run's wall time (which includes those checkpoints), as ratios
sampled / plain (1.0: free).

    python bench/samples.py [--quick] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from train_throughput import corpus

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"


def run(network: Path, steps: int, pnodes: int, sample_args: list[str]) -> tuple[float, list[float]]:
    """(wall seconds of the whole command, each step's time)."""
    with tempfile.TemporaryDirectory() as tmp:
        metrics = Path(tmp) / "m.jsonl"
        cmd = [str(Path(sys.executable).parent / "computeall"), "run", str(network), "--data", *corpus(),
               "--steps", str(steps), "--pnodes", str(pnodes), "--stages", str(pnodes), "--seed", "1", "--metrics-out", str(metrics),
               "--no-progress", *sample_args]
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True, timeout=1800)
        wall = time.perf_counter() - t0
        return wall, [json.loads(line)["step_time_s"] for line in metrics.read_text().splitlines()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer steps and repeats")
    parser.add_argument("--json", type=Path, default=RESULTS / "samples.json")
    parser.add_argument("--network", type=Path, default=REPO / "examples" / "networks" / "micro-gpt.yaml")
    parser.add_argument("--pnodes", type=int, default=2)
    args = parser.parse_args()
    steps, every, repeats = (12, 4, 1) if args.quick else (40, 5, 3)
    sampled_args = ["--sample-every", str(every), "--sample-prompt", "def ", "--sample-prompt", "class ",
                    "--sample-tokens", "48"]
    walls: dict[str, list[float]] = {"plain": [], "sampled": []}
    step_times: dict[str, list[float]] = {"plain": [], "sampled": []}
    for _ in range(repeats):
        for name, extra in (("plain", []), ("sampled", sampled_args)):
            wall, times = run(args.network, steps, args.pnodes, extra)
            walls[name].append(wall)
            step_times[name] += times[1:]  # the first step warms up
    rows = [{
        "name": f"run with samples every {every} steps (2 prompts x 48 tokens)", "network": args.network.name,
        "pnodes": args.pnodes, "steps": steps, "repeats": repeats,
        "median_step_s": statistics.median(step_times["sampled"]), "anchor_median_step_s": statistics.median(step_times["plain"]),
        "step_time_ratio": statistics.median(step_times["sampled"]) / statistics.median(step_times["plain"]),
        "wall_s": statistics.median(walls["sampled"]), "anchor_wall_s": statistics.median(walls["plain"]),
        "wall_ratio": statistics.median(walls["sampled"]) / statistics.median(walls["plain"]),
    }]
    r = rows[0]
    print(f"{args.network.name}, {args.pnodes} PNodes, {steps} steps, medians of {repeats} run(s) each")
    print(f"{'':<24}{'sampled':>10}{'plain':>10}{'ratio':>8}")
    print(f"{'median step time':<24}{r['median_step_s']:>9.3f}s{r['anchor_median_step_s']:>9.3f}s{r['step_time_ratio']:>8.2f}")
    print(f"{'whole run (wall)':<24}{r['wall_s']:>9.1f}s{r['anchor_wall_s']:>9.1f}s{r['wall_ratio']:>8.2f}")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
