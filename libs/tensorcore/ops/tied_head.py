import torch
from torch import nn

from computeall.kernels import linear_cross_entropy
from computeall.kernels.lce_vocab import linear_cross_entropy_sharded
from computeall.network.ops import VocabParams
from computeall.network.ops.embedding import SHARD_ROWS

from ..kernel_choice import lce_impl


class TiedLMHeadCE(nn.Module):
    """The cost VNode: cross-entropy of x @ embedding.T against the targets, fused and chunked.

    Returns the *sum* of token losses (fp32, whatever the VNode's precision): the trainer divides
    by the step's token count, so that any split into micro-batches gives the same gradient. The
    (tokens x vocab) logits never exist; the tied weight's gradient is computed in the forward
    (accumulated in fp32) and added to the embedding's own gradient by the runtime.

    A vocabulary larger than `shard_rows` runs shard by shard instead (`computeall.kernels.lce_vocab`),
    as the split network's shards do (`computeall.network.vocab_split`): the same bits, at the cost of
    computing the logits again in backward.
    """

    def __init__(self, dim: int, vocab_size: int, weight: nn.Parameter, shard_rows: int = SHARD_ROWS) -> None:
        super().__init__()
        self.tied_weight = [weight]  # a list, so the shared Parameter is not registered twice
        vocab = VocabParams(vocab_size=vocab_size, dim=dim, shard_rows=shard_rows)
        self.bounds = [vocab.bounds(s) for s in range(vocab.shards)]

    @property
    def weight(self) -> nn.Parameter:
        return self.tied_weight[0]

    def reset_parameters(self, generator: torch.Generator) -> None:
        pass

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        """Sampling: the logits (B, t, vocab) its loss is the cross-entropy of."""
        return x @ self.weight.T

    def forward(self, x: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        w = self.weight if self.weight.dtype == x.dtype else self.weight.to(x.dtype)  # head in its own precision
        if len(self.bounds) > 1:
            return linear_cross_entropy_sharded(x, w, targets.long(), self.bounds, reduction="sum")
        return linear_cross_entropy(x, w, targets.long(), reduction="sum", impl=lce_impl(x.device))


class LMHeadCE(nn.Module):
    """An untied LM head: `TiedLMHeadCE`'s loss with a weight (vocab, dim) of its own."""

    def __init__(self, dim: int, vocab_size: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(vocab_size, dim))

    def reset_parameters(self, generator: torch.Generator) -> None:
        with torch.no_grad():
            self.weight.normal_(0.0, 0.02, generator=generator)

    logits = TiedLMHeadCE.logits

    def forward(self, x: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return linear_cross_entropy(x, self.weight, targets.long(), reduction="sum", impl=lce_impl(x.device))
