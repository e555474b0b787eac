"""Fused kernels: flash attention, fused LM-head cross-entropy, fused AdamW (fp32 or 8-bit state).

Each kernel has a plain-torch reference (the ground truth of the tests), a CPU path, a Triton path
for CUDA, and one call that runs the implementation it is told (`impl`); training tells it by a fixed
table of device, dtype and shape (`computeall.tensorcore.kernel_choice`).
"""

from .adamw_8bit import AdamW8bit
from .adamw_fused import FusedAdamW
from .attention import flash_attention
from .grad_check import found_nonfinite
from .lce import linear_cross_entropy

__all__ = [
    "AdamW8bit",
    "FusedAdamW",
    "flash_attention",
    "found_nonfinite",
    "linear_cross_entropy",
]
