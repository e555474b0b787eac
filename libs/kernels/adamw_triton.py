"""One-pass mixed-precision AdamW over a flat bucket as a Triton kernel (CUDA; interpreter in tests).

Reads the low-precision gradient, unscales it, updates the fp32 master and both fp32 moments,
and writes the low-precision parameter, all in one pass. The step count, loss scale and overflow
flag are read from device memory, so skipping an overflowed step needs no host sync.
"""

import math

import torch
import triton
import triton.language as tl

BLOCK = 1024


@triton.jit
def _adamw_kernel(GRAD, MASTER, EXP_AVG, EXP_AVG_SQ, PARAM, STEP, GRAD_SCALE, FOUND_INF, n, lr, beta1, beta2,
                  log2_beta1, log2_beta2, eps, weight_decay, BLOCK: tl.constexpr, WRITE_PARAM: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    # An overflow anywhere shrinks the live range to nothing: every store is masked, the step skipped.
    mask = offs < tl.where(tl.load(FOUND_INF) == 0, n, 0)
    step = tl.load(STEP)
    grad = tl.load(GRAD + offs, mask=mask, other=0.0).to(tl.float32) / tl.load(GRAD_SCALE)
    master = tl.load(MASTER + offs, mask=mask, other=0.0)
    exp_avg = beta1 * tl.load(EXP_AVG + offs, mask=mask, other=0.0) + (1 - beta1) * grad
    exp_avg_sq = beta2 * tl.load(EXP_AVG_SQ + offs, mask=mask, other=0.0) + (1 - beta2) * grad * grad
    bias1 = 1 - tl.exp2(step * log2_beta1)
    bias2 = 1 - tl.exp2(step * log2_beta2)
    master = master * (1 - lr * weight_decay)
    master = master - (lr / bias1) * exp_avg / (tl.sqrt(exp_avg_sq) / tl.sqrt(bias2) + eps)
    tl.store(MASTER + offs, master, mask=mask)
    tl.store(EXP_AVG + offs, exp_avg, mask=mask)
    tl.store(EXP_AVG_SQ + offs, exp_avg_sq, mask=mask)
    if WRITE_PARAM:
        tl.store(PARAM + offs, master.to(PARAM.dtype.element_ty), mask=mask)


def adamw_triton_(
    grad: torch.Tensor,
    master: torch.Tensor,
    exp_avg: torch.Tensor,
    exp_avg_sq: torch.Tensor,
    param: torch.Tensor,
    step: torch.Tensor,
    grad_scale: torch.Tensor,
    found_inf: torch.Tensor,
    lr: float,
    betas: tuple[float, float],
    eps: float,
    weight_decay: float,
) -> None:
    """All flat (n,); master, moments fp32; param/grad any float dtype; step, scale, flag 0-dim fp32."""
    n = master.numel()
    _adamw_kernel[(triton.cdiv(n, BLOCK),)](
        grad, master, exp_avg, exp_avg_sq, param, step, grad_scale, found_inf, n, lr, betas[0], betas[1],
        math.log2(betas[0]), math.log2(betas[1]), eps, weight_decay, BLOCK=BLOCK,
        WRITE_PARAM=param.data_ptr() != master.data_ptr(),
    )
