"""Triton kernel for the per-chunk softmax cross-entropy gradient of the fused LM head.

The matmuls stay in cuBLAS; this kernel replaces the five elementwise/reduction passes of
ce_grad_torch_ with two streaming passes over each row (online max/sum, then write the gradient).
"""

import torch
import triton
import triton.language as tl

from .lce_chunked import linear_cross_entropy_chunked

BLOCK_V = 4096  # the widest stretch of a row one pass of the kernel reads; a larger vocabulary loops


@triton.jit
def _ce_grad_kernel(LOGITS, TARGETS, ROW_SCALE, LOSS, V, stride, BLOCK_V: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    ptr = LOGITS + row * stride
    target = tl.load(TARGETS + row)
    scale = tl.load(ROW_SCALE + row)
    row_max = float("-inf")
    row_sum = 0.0
    for v0 in range(0, V, BLOCK_V):
        offs = v0 + tl.arange(0, BLOCK_V)
        x = tl.load(ptr + offs, mask=offs < V, other=float("-inf"))  # (BV,)
        new_max = tl.maximum(row_max, tl.max(x, 0))
        row_sum = row_sum * tl.exp(row_max - new_max) + tl.sum(tl.exp(x - new_max), 0)
        row_max = new_max
    lse = row_max + tl.log(row_sum)
    tl.store(LOSS + row, lse - tl.load(ptr + target))
    for v0 in range(0, V, BLOCK_V):
        offs = v0 + tl.arange(0, BLOCK_V)
        x = tl.load(ptr + offs, mask=offs < V, other=0.0)  # (BV,)
        grad = tl.exp(x - lse) * scale
        grad = tl.where(offs == target, grad - scale, grad)
        tl.store(ptr + offs, grad, mask=offs < V)


def ce_grad_triton_(logits: torch.Tensor, targets: torch.Tensor, row_scale: torch.Tensor) -> torch.Tensor:
    """Same contract as ce_grad_torch_: logits (C, V) fp32 overwritten with the gradient."""
    c, v = logits.shape
    loss = torch.empty(c, dtype=torch.float32, device=logits.device)  # (C,)
    block = min(BLOCK_V, triton.next_power_of_2(v))
    _ce_grad_kernel[(c,)](logits, targets, row_scale, loss, v, logits.stride(0), BLOCK_V=block)
    return loss


def linear_cross_entropy_triton(
    x: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, ignore_index: int = -100, reduction: str = "mean"
) -> torch.Tensor:
    return linear_cross_entropy_chunked(x, weight, targets, ignore_index, reduction, ce_grad_triton_)
