"""Wall-clock medians of a workload, synchronizing the device so GPU work is counted."""

import statistics
import time
from typing import Callable

import torch


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
