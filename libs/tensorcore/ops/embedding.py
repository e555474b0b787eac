from typing import Callable

import torch
from torch import nn

from computeall.network.ops.embedding import SHARD_ROWS
from computeall.network.vocab_split import shard_id


class Embedding(nn.Module):
    """Token ids (B, T) -> vectors (B, T, dim). Its weight may be tied to an LM head."""

    def __init__(self, vocab_size: int, dim: int, shard_rows: int = SHARD_ROWS) -> None:
        super().__init__()
        self.shard_rows = shard_rows
        self.weight = nn.Parameter(torch.empty(vocab_size, dim))

    def reset_parameters(self, generator: torch.Generator) -> None:
        with torch.no_grad():
            self.weight.normal_(0.0, 0.02, generator=generator)

    def reset_parameters_from(self, generator: torch.Generator, seed_of: Callable[[str], torch.Generator],
                              vid: str) -> None:
        """A vocabulary in shards (`computeall.network.vocab_split`): each shard's rows from that shard's
        VNode seed, so the split network starts from the same numbers."""
        if self.shard_rows >= self.weight.shape[0]:
            self.reset_parameters(generator)
            return
        with torch.no_grad():
            for s, rows in enumerate(self.weight.split(self.shard_rows)):
                rows.normal_(0.0, 0.02, generator=seed_of(shard_id(vid, s)))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.weight[tokens]  # (B, T, dim)
