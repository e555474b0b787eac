"""Precisions: the names in the network YAML, their torch dtypes, and casts at VNode boundaries.

A VNode computes in its own precision. What it receives from another VNode (local or over the
wire) may be in another precision: it casts floating inputs to its own dtype inside its autograd
graph, so the gradient it hands back is in the producer's dtype again. Token ids are never cast.
"""

import torch

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
NAMES = {dtype: name for name, dtype in DTYPES.items()}


def dtype_of(precision: str) -> torch.dtype:
    try:
        return DTYPES[precision]
    except KeyError:
        raise ValueError(f"unknown precision {precision!r}; use one of {', '.join(DTYPES)}") from None


def cast_input(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """x in the consumer's dtype when it is floating; integer tensors (token ids) pass unchanged."""
    if x.is_floating_point() and x.dtype != dtype:
        return x.to(dtype)
    return x
