"""Unfused mixed-precision AdamW: the readable ground truth for FusedAdamW.

One tensor at a time: upcast the gradient, unscale it, run the AdamW update on the fp32 master,
downcast the master into the low-precision parameter.
"""

import math

import torch


@torch.no_grad()
def adamw_reference_step(
    params: list[torch.Tensor],
    masters: list[torch.Tensor],
    exp_avgs: list[torch.Tensor],
    exp_avg_sqs: list[torch.Tensor],
    step: int,
    lr: float,
    betas: tuple[float, float] = (0.9, 0.999),
    eps: float = 1e-8,
    weight_decay: float = 0.0,
    grad_scale: float = 1.0,
) -> None:
    """Apply AdamW step number `step` (1-based) in place; skip everything if any grad is non-finite."""
    grads = [p.grad.float() / grad_scale for p in params]
    if not all(torch.isfinite(g).all() for g in grads):
        return
    beta1, beta2 = betas
    bias1 = 1 - beta1**step
    bias2 = 1 - beta2**step
    for p, master, m, v, g in zip(params, masters, exp_avgs, exp_avg_sqs, grads):
        master.mul_(1 - lr * weight_decay)
        m.mul_(beta1).add_(g, alpha=1 - beta1)
        v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
        denom = (v.sqrt() / math.sqrt(bias2)).add_(eps)
        master.addcdiv_(m, denom, value=-lr / bias1)
        p.copy_(master)
