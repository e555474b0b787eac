"""linear_cross_entropy: the dispatcher over the fused LM-head cross-entropy implementations.

Contract: x (..., D), weight (V, D) (possibly tied to an embedding), targets (...) int64 with
ignore_index; reduction "mean" (over non-ignored tokens) or "sum"; returns a scalar whose
gradients flow to x and weight. Every path except "reference" keeps logits to one chunk.
"""

from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

from .autotune import MeasuredChoice, next_pow2, run_forward_backward
from .lce_chunked import linear_cross_entropy_chunked
from .lce_reference import linear_cross_entropy_reference
from .triton_support import triton_usable

IMPLS = ("reference", "chunked", "triton", "builtin", "auto")
_choice = MeasuredChoice()


def _builtin(x, weight, targets, ignore_index, reduction):
    """torch's own chunked op: the anchor, and the pick wherever it is faster."""
    x2 = x.reshape(-1, x.shape[-1])  # (N, D)
    return F.linear_cross_entropy(
        x2, weight, targets.reshape(-1), ignore_index=ignore_index, reduction=reduction,
        options=nn.LinearCrossEntropyOptions(),
    )


def _triton(x, weight, targets, ignore_index, reduction):
    from .lce_triton import linear_cross_entropy_triton  # Triton is an optional extra

    return linear_cross_entropy_triton(x, weight, targets, ignore_index, reduction)


_FUNCS: dict[str, Callable[..., torch.Tensor]] = {
    "reference": linear_cross_entropy_reference,
    "chunked": linear_cross_entropy_chunked,
    "triton": _triton,
    "builtin": _builtin,
}


def _candidates(device: torch.device) -> list[str]:
    """Chunked (memory-bounded) implementations eligible on this device, preferred first."""
    if device.type == "cuda" and triton_usable(device):
        return ["triton", "chunked", "builtin"]
    return ["chunked", "builtin"]


def choose_linear_cross_entropy(x, weight, targets, ignore_index=-100, reduction="mean") -> str:
    """The implementation `impl="auto"` uses for this workload, timing candidates on first sight."""
    n, d = x.numel() // x.shape[-1], x.shape[-1]
    key = (x.device.type, x.dtype, next_pow2(n), d, next_pow2(weight.shape[0]), x.requires_grad, weight.requires_grad)

    def thunk(name):
        f = _FUNCS[name]
        return run_forward_backward(lambda x_, w_: f(x_, w_, targets, ignore_index, reduction), x, weight)

    return _choice.pick(key, x.device, {name: thunk(name) for name in _candidates(x.device)})


def linear_cross_entropy_choices() -> dict:
    return _choice.picks()


def linear_cross_entropy(
    x: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    ignore_index: int = -100,
    reduction: str = "mean",
    impl: str = "auto",
) -> torch.Tensor:
    if impl not in IMPLS:
        raise ValueError(f"impl must be one of {IMPLS}, got {impl!r}")
    if reduction not in ("mean", "sum"):
        raise ValueError(f"reduction must be 'mean' or 'sum', got {reduction!r}")
    if x.shape[-1] != weight.shape[-1] or x.shape[:-1] != targets.shape:
        raise ValueError(f"shapes x {tuple(x.shape)}, weight {tuple(weight.shape)}, targets {tuple(targets.shape)} do not fit")
    if impl == "auto":
        impl = choose_linear_cross_entropy(x, weight, targets, ignore_index, reduction)
    return _FUNCS[impl](x, weight, targets, ignore_index, reduction)
