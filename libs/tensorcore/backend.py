"""Which device a PNode computes on, and how many CPU threads it may use."""

from __future__ import annotations

import os

import torch


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
