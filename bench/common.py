"""Small shared helpers for benchmarks: median time, peak memory, result rows and their table."""

import json
from pathlib import Path
from typing import Callable

import torch

from computeall.kernels.timing import median_seconds, peak_bytes  # noqa: F401 (peak_bytes: for the benches)

RESULTS = Path(__file__).parent / "results"


def median_time(fn: Callable[[], object], device: torch.device, reps: int, warmup: int = 1) -> float:
    return median_seconds(fn, device, reps=reps, warmup=warmup)


def row(name: str, shape: str, metric: str, value: float, anchor: str, anchor_value: float, **extra) -> dict:
    return {"name": name, "shape": shape, "metric": metric, "value": value, "anchor": anchor,
            "anchor_value": anchor_value, "ratio": value / anchor_value, **extra}


def write_results(rows: list[dict], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(rows, indent=1) + "\n")


def _fmt(metric: str, x: float) -> str:
    return f"{x * 1e3:.1f} ms" if metric == "time_s" else f"{x / 2**20:.1f} MiB"


def print_table(rows: list[dict]) -> None:
    header = f"{'kernel':<32}{'shape':<28}{'metric':<11}{'value':>12}  {'anchor':<16}{'anchor value':>13}{'ratio':>8}  dispatch"
    print(header)
    print("-" * len(header))
    for r in rows:
        print(f"{r['name']:<32}{r['shape']:<28}{r['metric']:<11}{_fmt(r['metric'], r['value']):>12}  {r['anchor']:<16}"
              f"{_fmt(r['metric'], r['anchor_value']):>13}{r['ratio']:>8.3f}  {r.get('dispatch', '')}")
