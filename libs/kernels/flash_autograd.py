"""What every flash attention path does for autograd: save only the inputs, the output and the
log-sum-exp, and recompute the rest in backward.

A path gives its forward and its backward over (B, H, T, D) tensors; `flash_function` wraps them as
a `torch.autograd.Function` whose `apply(q, k, v, causal, block_m, block_n)` returns the output.
"""

from collections.abc import Callable

import torch

Tensor = torch.Tensor
# (q, k, v, causal, block_m, block_n) -> ((q, k, v) as backward wants them, output, log-sum-exp)
Forward = Callable[[Tensor, Tensor, Tensor, bool, int, int], tuple[tuple[Tensor, Tensor, Tensor], Tensor, Tensor]]
# (q, k, v, output, log-sum-exp, grad_output, causal, block_m, block_n) -> (dq, dk, dv)
Backward = Callable[[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, bool, int, int], tuple[Tensor, Tensor, Tensor]]


def flash_function(name: str, forward: Forward, backward: Backward) -> type[torch.autograd.Function]:
    def forward_(ctx, q: Tensor, k: Tensor, v: Tensor, causal: bool, block_m: int, block_n: int) -> Tensor:
        saved, out, lse = forward(q, k, v, causal, block_m, block_n)
        ctx.save_for_backward(*saved, out, lse)
        ctx.causal, ctx.block_m, ctx.block_n = causal, block_m, block_n
        return out

    def backward_(ctx, grad_out: Tensor):
        dq, dk, dv = backward(*ctx.saved_tensors, grad_out, ctx.causal, ctx.block_m, ctx.block_n)
        return dq, dk, dv, None, None, None

    doc = f"{name} flash attention: saves only inputs, output and log-sum-exp."
    return type(name, (torch.autograd.Function,), {"forward": staticmethod(forward_), "backward": staticmethod(backward_),
                                                   "__doc__": doc, "__module__": forward.__module__})
