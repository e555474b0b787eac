"""Fused kernels: flash attention, fused LM-head cross-entropy, fused AdamW.

Each kernel has a plain-torch reference, a CPU path, a Triton path for CUDA and a dispatcher
that picks among them by device, dtype and measured speed.
"""

from .adamw_fused import FusedAdamW
from .attention import attention_choices, flash_attention
from .grad_check import found_nonfinite
from .lce import linear_cross_entropy, linear_cross_entropy_choices

__all__ = [
    "FusedAdamW",
    "attention_choices",
    "flash_attention",
    "found_nonfinite",
    "linear_cross_entropy",
    "linear_cross_entropy_choices",
]
