"""Which device a PNode computes on, and how many CPU threads it may use."""

from __future__ import annotations

import ctypes
import os
import sys

import torch

# glibc's malloc serves a request this large or larger with a mapping of its own, unmapped on free
# (its default, 128 KiB, before it starts raising it; see `map_large_allocations`).
MMAP_THRESHOLD_BYTES = 128 * 1024
_M_MMAP_THRESHOLD = -3  # mallopt's parameter number, from glibc's malloc.h


def select_device(requested: str = "auto") -> torch.device:
    if requested != "auto":
        return torch.device(requested)
    if torch.cuda.is_available():
        return torch.device("cuda")
    if getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def set_cpu_threads(processes_on_machine: int) -> int:
    """Several PNodes on one machine share its cores instead of each taking all of them."""
    threads = max(1, (os.cpu_count() or 1) // max(1, processes_on_machine))
    torch.set_num_threads(threads)
    return threads


def device_memory(device: torch.device) -> tuple[int | None, int | None]:
    """(allocated, reserved) bytes on a GPU; (None, None) on the CPU."""
    if device.type == "cuda":
        return torch.cuda.memory_allocated(device), torch.cuda.memory_reserved(device)
    return None, None


def map_large_allocations(threshold: int = MMAP_THRESHOLD_BYTES) -> bool:
    """Make glibc return a freed tensor's memory to the OS at once; False where malloc is not glibc's.

    glibc raises its mmap threshold to the size of each large block freed (up to 32 MiB), after which
    activations are carved from its heaps, which give memory back only from their top: the holes
    that a step's temporaries leave between kept activations stay resident and the heaps grow from
    step to step. Measured on the seed network, a PNode's peak RSS stood 450-500 MiB above its live
    tensor bytes, and recompute saved a quarter of what it frees (docs/decisions.md). Fixing the
    threshold keeps tensors in mappings of their own; the cost is page faults on each new tensor,
    about 15% of a seed-network step: a PNode sets it when a plan asks (`computeall.pnode.lean_memory`).
    What the heaps hold free from before (the stage's build) is handed back then too (`malloc_trim`).
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except AttributeError:  # another C library (musl) has no mallopt
        return False
    fixed = bool(mallopt(_M_MMAP_THRESHOLD, threshold))
    ctypes.CDLL(None).malloc_trim(0)
    return fixed
