"""A tied embedding and LM head split by vocabulary (computeall.network.vocab_split), as torch modules.

Each computes what the unsplit embedding and tied head compute for its rows, with the same
functions (`computeall.kernels.lce_vocab`), so a split network and the unsplit one are the same bits.
"""

import torch
from torch import nn

from computeall.kernels.lce_vocab import STATS, CombinedLoss, ShardStats, row_scales, shard_grads


class EmbeddingShard(nn.Module):
    """Rows lo..hi of the embedding: tokens (B, T) -> (B, T, dim), their rows where they are among its
    own, zeros elsewhere. Its gradient adds each token's row in token order, as the unsplit lookup's."""

    def __init__(self, vocab_size: int, dim: int, shard_rows: int, shard: int) -> None:
        super().__init__()
        self.lo = shard * shard_rows
        self.weight = nn.Parameter(torch.empty(min(shard_rows, vocab_size - self.lo), dim))

    def reset_parameters(self, generator: torch.Generator) -> None:
        """From its own VNode's seed, as the unsplit embedding draws these rows (`Embedding.reset_parameters_from`)."""
        with torch.no_grad():
            self.weight.normal_(0.0, 0.02, generator=generator)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        local = tokens - self.lo
        mine = (local >= 0) & (local < self.weight.shape[0])  # (B, T)
        rows = self.weight[local[mine]]  # (n, dim)
        return rows.new_zeros(*tokens.shape, rows.shape[-1]).index_put((mine,), rows)  # (B, T, dim)


class EmbeddingGather(nn.Module):
    """Every token's vector from the shard that holds its row: the unsplit embedding's output."""

    def __init__(self, vocab_size: int, dim: int, shard_rows: int) -> None:
        super().__init__()
        self.shard_rows = shard_rows

    def reset_parameters(self, generator: torch.Generator) -> None:
        pass

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        *shards, tokens = inputs
        owner = (tokens // self.shard_rows)[..., None]  # (B, T, 1)
        out = shards[0]
        for s, part in enumerate(shards[1:], start=1):
            out = torch.where(owner == s, part, out)  # a selection: the rows' very bits
        return out


class LMHeadShard(nn.Module):
    """Tied to its embedding shard: x (B, T, dim), targets (B, T) -> its statistics (B, T, STATS) fp32.
    Its backward reads, as the statistics' gradient, the coefficients `ShardedCE` hands back.

    With `defer_weight_grad` (the runtime's call: `VNodeRuntime.defer_tied_gradients`) its backward
    gives x's gradient only, and `weight_grad` gives the weight's when the embedding shard's backward
    of the same micro-batch comes: the same chunks, so the same bits, for one more logits product a
    chunk, and no dense gradient of the rows held while the micro-batch crosses the pipeline."""

    defer_weight_grad = False

    def __init__(self, vocab_size: int, dim: int, shard_rows: int, shard: int, weight: nn.Parameter) -> None:
        super().__init__()
        self.lo = shard * shard_rows
        self.tied_weight = [weight]  # a list, so the shared Parameter is not registered twice

    @property
    def weight(self) -> nn.Parameter:
        return self.tied_weight[0]

    def reset_parameters(self, generator: torch.Generator) -> None:
        pass

    def forward(self, x: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        w = self.weight if self.weight.dtype == x.dtype else self.weight.to(x.dtype)  # as the unsplit head
        if self.defer_weight_grad:
            w = w.detach()
        stats = ShardStats.apply(x.reshape(-1, x.shape[-1]), w, targets.reshape(-1).long(), self.lo)
        return stats.view(*x.shape[:-1], -1)

    @torch.no_grad()
    def weight_grad(self, x: torch.Tensor, targets: torch.Tensor, stats: torch.Tensor,
                    coefficient: torch.Tensor) -> torch.Tensor:
        """The tied weight's gradient of one micro-batch, from what its forward read and made and the
        coefficients its backward got: what the backward of `ShardStats` would have given it."""
        w = self.weight.detach() if self.weight.dtype == x.dtype else self.weight.detach().to(x.dtype)
        _, grad_w = shard_grads(x.detach().reshape(-1, x.shape[-1]), w, targets.reshape(-1).long(), self.lo,
                                stats.reshape(-1, STATS), coefficient.reshape(-1, STATS), False, True)
        return grad_w.to(self.weight.dtype)


class ShardedCE(nn.Module):
    """The loss: the summed cross-entropy of every token, from the shards' statistics in shard order."""

    def __init__(self, vocab_size: int, dim: int, shard_rows: int) -> None:
        super().__init__()

    def reset_parameters(self, generator: torch.Generator) -> None:
        pass

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        *stats, targets = inputs
        flat = [s.reshape(-1, s.shape[-1]).float() for s in stats]
        return CombinedLoss.apply(row_scales(targets.reshape(-1).long(), -100, "sum"), *flat)
