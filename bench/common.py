"""Small shared helpers for benchmarks: median time, peak memory, result rows and their table."""

import json
from pathlib import Path
from typing import Callable

import torch
from torch.profiler import ProfilerActivity, profile

from computeall.kernels.timing import median_seconds, synchronize

RESULTS = Path(__file__).parent / "results"


def median_time(fn: Callable[[], object], device: torch.device, reps: int, warmup: int = 1) -> float:
    return median_seconds(fn, device, reps=reps, warmup=warmup)


def peak_bytes(fn: Callable[[], object], device: torch.device) -> int:
    """Peak bytes allocated while fn() runs, above what was live when it started.

    CUDA: the caching allocator's own high-water mark. CPU has no such counter and RSS is too
    coarse (page reuse, allocator caching), so we run fn once under the profiler with
    profile_memory=True, which records every CPU-allocator allocation and free with its size,
    including temporaries inside single ops, and replay them in time order.
    """
    if device.type == "cuda":
        synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
        fn()
        synchronize(device)
        return torch.cuda.max_memory_allocated(device) - base
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]" and e.device_type().name == "CPU"]
    live = peak = 0
    for event in sorted(events, key=lambda e: e.start_ns()):
        live += event.nbytes()
        peak = max(peak, live)
    return peak


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
