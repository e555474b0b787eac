"""Fused kernels: flash attention, fused LM-head cross-entropy, fused AdamW.

Each kernel has a plain-torch reference, a CPU path, a Triton path for CUDA and a dispatcher
that picks among them by device, dtype and measured speed.
"""

from .attention import flash_attention
from .lce import linear_cross_entropy

__all__ = ["flash_attention", "linear_cross_entropy"]
