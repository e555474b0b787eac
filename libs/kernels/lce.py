"""linear_cross_entropy: the fused LM-head cross-entropy implementations behind one call, picked by name.

Which one training runs is a fixed table by device (`computeall.tensorcore.kernel_choice`), never a
timing (see attention.py); `bench/kernels.py` measures it against torch's `F.linear_cross_entropy`.

Contract: x (..., D), weight (V, D) (possibly tied to an embedding), targets (...) int64 with
ignore_index; reduction "mean" (over non-ignored tokens) or "sum"; returns a scalar whose
gradients flow to x and weight. Every path except "reference" keeps logits to one chunk.
"""

from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

from .lce_chunked import linear_cross_entropy_chunked
from .lce_reference import linear_cross_entropy_reference


def _builtin(x, weight, targets, ignore_index, reduction):
    """torch's own chunked op: the benchmark's anchor."""
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
IMPLS = tuple(_FUNCS)


def linear_cross_entropy(
    x: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    ignore_index: int = -100,
    reduction: str = "mean",
    *,
    impl: str,
) -> torch.Tensor:
    if impl not in IMPLS:
        raise ValueError(f"impl must be one of {IMPLS}, got {impl!r}")
    if reduction not in ("mean", "sum"):
        raise ValueError(f"reduction must be 'mean' or 'sum', got {reduction!r}")
    if x.shape[-1] != weight.shape[-1] or x.shape[:-1] != targets.shape:
        raise ValueError(f"shapes x {tuple(x.shape)}, weight {tuple(weight.shape)}, targets {tuple(targets.shape)} do not fit")
    return _FUNCS[impl](x, weight, targets, ignore_index, reduction)
