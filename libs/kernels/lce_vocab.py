"""The LM head's cross-entropy over a vocabulary split into shards of rows, shard by shard.

The softmax runs over the whole vocabulary, but each shard of the weight (rows lo..hi) can only
see its own logits. So each shard computes, per token, three statistics (`STATS`): its largest
logit m_s, the sum l_s of exp(logit - m_s) over its rows, and the target's logit when the target
is one of its rows (else 0). `combine` folds them in shard order into the log-sum-exp and the
loss. Backward, `coefficients` hands each shard, per token, the factor that turns its
exp(logit - m_s) into the loss's gradient and the target's own term; the shard recomputes its
logits (nothing of size tokens x vocabulary is kept between forward and backward) and gives the
gradients of x and of its rows (`shard_grads`).

One head holding every shard (`ShardedLinearCrossEntropy`) and shards on different PNodes (the
`lm_head_shard` and `sharded_ce` VNodes) call the same functions on the same blocks of rows and
fold the shards in the same order, so they compute the same bits.
"""

from __future__ import annotations

from typing import Sequence

import torch

from computeall.network.ops.tied_head import logits_chunk_rows

from .lce_chunked import WeightGradient

STATS = 3  # per token and shard: max logit, sum of exp(logit - max), the target's logit (0 elsewhere)


Bounds = Sequence[tuple[int, int]]  # (lo, hi) rows of every shard, in order (`computeall.network.vocab_split`)


def _inside(targets: torch.Tensor, lo: int, rows: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Which targets are rows of the shard starting at `lo`, and their row in it (0 where not)."""
    local = targets - lo
    inside = (local >= 0) & (local < rows)
    return inside, torch.where(inside, local, 0)


@torch.no_grad()
def shard_stats(x: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, lo: int) -> torch.Tensor:
    """x (N, D), the shard's rows weight (R, D) in x's dtype, targets (N,) -> (N, STATS) fp32."""
    n, rows = x.shape[0], weight.shape[0]
    out = torch.empty(n, STATS, dtype=torch.float32, device=x.device)
    step = logits_chunk_rows(rows, x.shape[1], n)
    for s in range(0, n, step):
        e = min(s + step, n)
        logits = (x[s:e] @ weight.t()).float()  # (C, R)
        inside, local = _inside(targets[s:e], lo, rows)
        out[s:e, 2] = torch.where(inside, logits.gather(1, local[:, None]).squeeze(1), 0.0)
        row_max = logits.amax(dim=1)  # (C,)
        out[s:e, 0] = row_max
        out[s:e, 1] = logits.sub_(row_max[:, None]).exp_().sum(dim=1)
    return out


def row_scales(targets: torch.Tensor, ignore_index: int, reduction: str) -> torch.Tensor:
    """(N,) fp32: each token's weight in the loss (0 for an ignored one), as the fused kernel weighs it."""
    valid = targets != ignore_index
    denom = valid.sum().clamp_min(1) if reduction == "mean" else torch.ones((), device=targets.device)
    return valid.float() / denom


@torch.no_grad()
def combine(stats: Sequence[torch.Tensor], row_scale: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Every shard's (N, STATS), in shard order -> the loss () fp32 and the log-sum-exp (N,)."""
    top = torch.stack([s[:, 0] for s in stats]).amax(dim=0)  # (N,): a max is exact in any order
    total = stats[0][:, 1] * (stats[0][:, 0] - top).exp()
    target = stats[0][:, 2]
    for s in stats[1:]:
        total = total + s[:, 1] * (s[:, 0] - top).exp()
        target = target + s[:, 2]  # one shard holds the target, the others add 0
    lse = top + total.log()
    return ((lse - target) * row_scale).sum(), lse


@torch.no_grad()
def coefficients(stats: Sequence[torch.Tensor], lse: torch.Tensor, row_scale: torch.Tensor,
                 grad_loss: torch.Tensor) -> list[torch.Tensor]:
    """What each shard's backward needs, shaped like its statistics (N, STATS): the factor of its
    exp(logit - m_s) in the gradient, the target's term (subtracted at its row), and 0."""
    scale = row_scale * grad_loss.float()  # (N,)
    return [torch.stack((scale * (s[:, 0] - lse).exp(), scale, torch.zeros_like(scale)), dim=1) for s in stats]


@torch.no_grad()
def shard_grads(x: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, lo: int, stats: torch.Tensor,
                coefficient: torch.Tensor, need_x: bool, need_w: bool) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """The shard's gradients of x (N, D) in x's dtype and of its rows (R, D) in the weight's dtype
    (accumulated in fp32), from its statistics and `coefficients`' row for it."""
    n, rows = x.shape[0], weight.shape[0]
    grad_x = torch.empty_like(x) if need_x else None
    grad_w = WeightGradient(weight.shape, x.device) if need_w else None
    step = logits_chunk_rows(rows, x.shape[1], n)
    for s in range(0, n, step):
        e = min(s + step, n)
        x_c = x[s:e]
        logits = (x_c @ weight.t()).float()  # (C, R): the very logits of the forward
        grad = logits.sub_(stats[s:e, 0, None]).exp_().mul_(coefficient[s:e, 0, None])
        inside, local = _inside(targets[s:e], lo, rows)
        hit = inside.nonzero().squeeze(1)
        grad[hit, local[hit]] -= coefficient[s:e, 1][hit]  # one row per token: no order to keep
        if grad_x is not None:
            grad_x[s:e] = grad.to(x.dtype) @ weight
        if grad_w is not None:
            grad_w.add(grad, x_c.float())
    return grad_x, (grad_w.rounded(weight.dtype) if grad_w is not None else None)


class ShardedLinearCrossEntropy(torch.autograd.Function):
    """Every shard in one head: their statistics, `combine`, and in backward every shard's gradients,
    x's folded in shard order (as the runtime folds the gradients of shards on several PNodes)."""

    @staticmethod
    def forward(ctx, x, weight, targets, bounds: Bounds, ignore_index: int, reduction: str):
        stats = [shard_stats(x, weight[lo:hi], targets, lo) for lo, hi in bounds]
        row_scale = row_scales(targets, ignore_index, reduction)
        loss, lse = combine(stats, row_scale)
        ctx.bounds = bounds
        ctx.save_for_backward(x, weight, targets, row_scale, lse, *stats)
        return loss

    @staticmethod
    def backward(ctx, grad_loss):
        x, weight, targets, row_scale, lse, *stats = ctx.saved_tensors
        need_x, need_w = ctx.needs_input_grad[:2]
        grad_x, grad_w = None, []
        for (lo, hi), s, c in zip(ctx.bounds, stats, coefficients(stats, lse, row_scale, grad_loss)):
            gx, gw = shard_grads(x, weight[lo:hi], targets, lo, s, c, need_x, need_w)
            if gx is not None:
                grad_x = gx if grad_x is None else grad_x + gx
            grad_w.append(gw)
        return grad_x, (torch.cat(grad_w) if need_w else None), None, None, None, None


def linear_cross_entropy_sharded(x: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, bounds: Bounds,
                                 ignore_index: int = -100, reduction: str = "mean") -> torch.Tensor:
    """x (..., D), weight (V, D), targets (...) -> scalar fp32 loss, the vocabulary in the shards `bounds`."""
    x2 = x.reshape(-1, x.shape[-1])
    return ShardedLinearCrossEntropy.apply(x2, weight, targets.reshape(-1), list(bounds), ignore_index, reduction)


class ShardStats(torch.autograd.Function):
    """One shard on its own: forward its statistics, backward its gradients from its coefficients
    (which arrive as the statistics' gradient)."""

    @staticmethod
    def forward(ctx, x, weight, targets, lo: int):
        stats = shard_stats(x, weight, targets, lo)
        ctx.lo = lo
        ctx.save_for_backward(x, weight, targets, stats)
        return stats

    @staticmethod
    def backward(ctx, coefficient):
        x, weight, targets, stats = ctx.saved_tensors
        grad_x, grad_w = shard_grads(x, weight, targets, ctx.lo, stats, coefficient, *ctx.needs_input_grad[:2])
        return grad_x, grad_w, None, None


class CombinedLoss(torch.autograd.Function):
    """The shards' statistics -> the loss; backward hands each shard its coefficients."""

    @staticmethod
    def forward(ctx, row_scale, *stats):
        loss, lse = combine(stats, row_scale)
        ctx.save_for_backward(row_scale, lse, *stats)
        return loss

    @staticmethod
    def backward(ctx, grad_loss):
        row_scale, lse, *stats = ctx.saved_tensors
        return (None, *coefficients(stats, lse, row_scale, grad_loss))
