"""Measuring a workload: wall-clock medians (synchronizing the device so GPU work is counted) and
peak memory."""

import statistics
import time
from typing import Callable

import torch
from torch.profiler import ProfilerActivity, profile


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def median_seconds(fn: Callable[[], object], device: torch.device, reps: int = 3, warmup: int = 1) -> float:
    """Median wall time of fn() over `reps` runs after `warmup` untimed runs."""
    for _ in range(warmup):
        fn()
    synchronize(device)
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        synchronize(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


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
