"""flash_attention: the dispatcher over the attention implementations.

Contract: q, k, v (B, H, T, D), any T, D in 32..128, fp32/bf16/fp16, same dtype and device;
returns (B, H, T, D) in q's dtype; causal masking is top-left aligned (query i sees keys <= i).
"""

from typing import Callable

import torch
import torch.nn.functional as F

from .attention_reference import attention_reference
from .attention_tiled import flash_attention_tiled
from .autotune import MeasuredChoice, next_pow2, run_forward_backward
from .triton_support import triton_usable

IMPLS = ("reference", "tiled", "triton", "sdpa", "auto")
_choice = MeasuredChoice()


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


def _candidates(device: torch.device) -> list[str]:
    """Memory-bounded implementations eligible on this device, preferred first."""
    if device.type == "cuda":
        return ["triton", "sdpa"] if triton_usable(device) else ["sdpa"]
    return ["tiled", "sdpa"]


def choose_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = True) -> str:
    """The implementation `impl="auto"` uses for this workload, timing candidates on first sight."""
    b, h, t, d = q.shape
    key = (q.device.type, q.dtype, next_pow2(b * h), next_pow2(t), d, causal, q.requires_grad)
    thunks = {name: run_forward_backward(lambda *x, f=_FUNCS[name]: f(*x, causal), q, k, v) for name in _candidates(q.device)}
    return _choice.pick(key, q.device, thunks)


def attention_choices() -> dict:
    return _choice.picks()


def flash_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = True, impl: str = "auto"
) -> torch.Tensor:
    if impl not in IMPLS:
        raise ValueError(f"impl must be one of {IMPLS}, got {impl!r}")
    if q.dim() != 4 or q.shape != k.shape or q.shape != v.shape:
        raise ValueError(f"q, k, v must share one (B, H, T, D) shape, got {q.shape}, {k.shape}, {v.shape}")
    if impl == "auto":
        impl = choose_attention(q, k, v, causal)
    return _FUNCS[impl](q, k, v, causal)
