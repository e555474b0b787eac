"""Whether Triton kernels can run here: on a CUDA device, or anywhere under TRITON_INTERPRET=1."""

import importlib.util
import os

import torch


def triton_importable() -> bool:
    return importlib.util.find_spec("triton") is not None


def triton_usable(device: torch.device) -> bool:
    """Triton compiles for CUDA; on the CPU it only runs through its interpreter (tests)."""
    if not triton_importable():
        return False
    return device.type == "cuda" or os.environ.get("TRITON_INTERPRET") == "1"
