"""flash_attention: the attention implementations behind one call, picked by name.

Which one training runs is a fixed table by device and head dim (`computeall.tensorcore.kernel_choice`),
never a timing: two implementations round differently, and processes that timed differently would
compute different numbers. `bench/kernels.py` measures the chosen one against torch's SDPA.

Contract: q, k, v (B, H, T, D), any T, D in 32..128, fp32/bf16/fp16, same dtype and device;
returns (B, H, T, D) in q's dtype; causal masking is top-left aligned (query i sees keys <= i).
"""

from typing import Callable

import torch
import torch.nn.functional as F

from .attention_reference import attention_reference
from .attention_tiled import flash_attention_tiled


def _sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> torch.Tensor:
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


def _triton(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> torch.Tensor:
    from .attention_triton import flash_attention_triton  # Triton is an optional extra

    return flash_attention_triton(q, k, v, causal)


_FUNCS: dict[str, Callable[..., torch.Tensor]] = {
    "reference": attention_reference,
    "tiled": flash_attention_tiled,
    "triton": _triton,
    "sdpa": _sdpa,
}
IMPLS = tuple(_FUNCS)


def flash_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = True, *, impl: str
) -> torch.Tensor:
    if impl not in IMPLS:
        raise ValueError(f"impl must be one of {IMPLS}, got {impl!r}")
    if q.dim() != 4 or q.shape != k.shape or q.shape != v.shape:
        raise ValueError(f"q, k, v must share one (B, H, T, D) shape, got {q.shape}, {k.shape}, {v.shape}")
    return _FUNCS[impl](q, k, v, causal)
