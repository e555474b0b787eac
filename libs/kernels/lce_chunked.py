"""Fused tied LM head + cross-entropy, chunked over tokens, gradients computed in the forward.

For each chunk of C tokens: logits (C, V) = x_c W^T in fp32, turned in place into
dlogits = (softmax - onehot) * row_scale, then immediately consumed by dx_c = dlogits W and
dW += dlogits^T x_c (accumulated in fp32, `WeightGradient`). Peak extra memory is one (C, V) chunk
plus the gradients themselves; the N x V logits never exist. backward() only scales the saved
gradients by grad_output (in place), so a tied embedding weight simply gets this gradient added by
autograd.
"""

from typing import Callable

import torch

from computeall.network.ops.tied_head import logits_chunk_rows

# The weight's fp32 gradient is kept in blocks of this many elements (1 MiB each).
GRAD_BLOCK_ELEMENTS = 256 * 1024

# (logits (C, V) fp32, targets (C,) in range, row_scale (C,) fp32) -> row loss (C,) fp32;
# overwrites logits with row_scale * (softmax - onehot).
CeGrad = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


class WeightGradient:
    """A (V, D) weight's gradient summed over chunks of tokens in fp32, in blocks of rows that are each an
    allocation of their own: `rounded` hands it over in the weight's dtype a block at a time, freeing each
    fp32 block as its rows are written, so the fp32 sum and its rounded copy never both exist whole
    (seed-64heads' table: 64 MiB and 32 MiB at once, the head's peak, before)."""

    def __init__(self, shape: torch.Size, device: torch.device) -> None:
        vocab, dim = shape
        self.rows = max(1, GRAD_BLOCK_ELEMENTS // dim)
        self.blocks: list[torch.Tensor | None] = [
            torch.zeros(min(self.rows, vocab - lo), dim, dtype=torch.float32, device=device)
            for lo in range(0, vocab, self.rows)
        ]

    def add(self, grad_logits: torch.Tensor, x: torch.Tensor) -> None:
        """+= grad_logits^T x: grad_logits (C, V) fp32, x (C, D) fp32."""
        for i, block in enumerate(self.blocks):
            block.addmm_(grad_logits[:, i * self.rows: i * self.rows + block.shape[0]].t(), x)

    def rounded(self, dtype: torch.dtype) -> torch.Tensor:
        """The sum as one (V, D) tensor of `dtype`; the fp32 blocks are gone after."""
        out = torch.empty(sum(b.shape[0] for b in self.blocks), self.blocks[0].shape[1], dtype=dtype,
                          device=self.blocks[0].device)
        for i, block in enumerate(self.blocks):
            out[i * self.rows: i * self.rows + block.shape[0]].copy_(block)
            self.blocks[i] = None
        return out


def ce_grad_torch_(logits: torch.Tensor, targets: torch.Tensor, row_scale: torch.Tensor) -> torch.Tensor:
    target_logit = logits.gather(1, targets[:, None]).squeeze(1)  # (C,)
    row_max = logits.amax(dim=1, keepdim=True)  # (C, 1)
    probs = logits.sub_(row_max).exp_()  # (C, V), unnormalized
    row_sum = probs.sum(dim=1, keepdim=True)  # (C, 1)
    loss = (row_max + row_sum.log()).squeeze(1) - target_logit  # (C,)
    probs.mul_(row_scale[:, None] / row_sum)
    probs.scatter_add_(1, targets[:, None], -row_scale[:, None])
    return loss


def fused_forward(
    x: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    ignore_index: int,
    reduction: str,
    ce_grad_: CeGrad,
    need_grad_x: bool,
    need_grad_w: bool,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """x (N, D), weight (V, D), targets (N,) -> loss () fp32, grad_x (N, D) or None, grad_w (V, D) or None."""
    n, _ = x.shape
    vocab = weight.shape[0]
    valid = targets != ignore_index  # (N,)
    safe_targets = torch.where(valid, targets, 0)  # (N,): ignored rows get weight 0 below
    # Mean over valid tokens; an all-ignored batch yields loss 0 and zero gradients (torch gives nan).
    denom = valid.sum().clamp_min(1) if reduction == "mean" else torch.ones((), device=x.device)
    row_scale = valid.float() / denom  # (N,): loss weight of each token, no host sync
    loss = torch.zeros((), dtype=torch.float32, device=x.device)
    grad_x = torch.empty_like(x) if need_grad_x else None  # (N, D)
    grad_w = WeightGradient(weight.shape, x.device) if need_grad_w else None
    rows = logits_chunk_rows(vocab, x.shape[1], n)
    for s in range(0, n, rows):
        e = min(s + rows, n)
        x_c = x[s:e]  # (C, D)
        logits = (x_c @ weight.t()).float()  # (C, V), a no-op cast for fp32
        row_loss = ce_grad_(logits, safe_targets[s:e], row_scale[s:e])  # logits now hold dlogits
        loss += (row_loss * row_scale[s:e]).sum()
        if grad_x is not None:
            grad_x[s:e] = logits.to(x.dtype) @ weight  # (C, D)
        if grad_w is not None:
            grad_w.add(logits, x_c.float())  # (V, D) += (V, C) @ (C, D), fp32
    return loss, grad_x, (grad_w.rounded(weight.dtype) if grad_w is not None else None)


class FusedLinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, targets, ignore_index: int, reduction: str, ce_grad_: CeGrad):
        loss, grad_x, grad_w = fused_forward(
            x, weight, targets, ignore_index, reduction, ce_grad_, ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        )
        ctx.save_for_backward(grad_x, grad_w)
        return loss  # fp32 whatever the input dtype: a bf16 sum over many tokens would round badly

    @staticmethod
    def backward(ctx, grad_loss):
        # The saved gradients are this graph's alone: scaled in place, as a copy would hold the
        # weight's gradient twice at the head's peak. A second backward through the graph
        # (retain_graph) is refused by autograd's version check when it unpacks them again.
        grad_x, grad_w = ctx.saved_tensors
        scale = grad_loss.float()
        dx = grad_x.mul_(scale) if grad_x is not None else None
        dw = grad_w.mul_(scale) if grad_w is not None else None
        return dx, dw, None, None, None, None


def linear_cross_entropy_chunked(
    x: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    ignore_index: int = -100,
    reduction: str = "mean",
    ce_grad_: CeGrad = ce_grad_torch_,
) -> torch.Tensor:
    """x (..., D), weight (V, D), targets (...) -> scalar fp32 loss."""
    x2 = x.reshape(-1, x.shape[-1])  # (N, D)
    return FusedLinearCrossEntropy.apply(x2, weight, targets.reshape(-1), ignore_index, reduction, ce_grad_)
