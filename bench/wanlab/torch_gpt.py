"""The plain torch model (`computeall.tensorcore.plain_gpt`) cut into the two stages a torch user would
pipeline, and the batches every rank draws."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from computeall.tensorcore.plain_gpt import GPT, GPTShape, loss_fn

__all__ = ["GPT", "GPTShape", "FirstStage", "LastStage", "batch", "loss_fn"]


class FirstStage(nn.Module):
    def __init__(self, gpt: GPT, blocks: range) -> None:
        super().__init__()
        self.embed = gpt.embed
        self.blocks = nn.ModuleList(gpt.blocks[i] for i in blocks)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        return x  # (B, T, dim): what crosses the link


class LastStage(nn.Module):
    """The rest, with its own copy of the tied weight: both stages sum their gradients of it each step."""

    def __init__(self, gpt: GPT, blocks: range) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(gpt.blocks[i] for i in blocks)
        self.norm_f = gpt.norm_f
        self.head = nn.Parameter(gpt.embed.weight.detach().clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return F.linear(self.norm_f(x), self.head)  # (B, T, vocab)


def batch(s: GPTShape, size: int, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Step `step`'s (tokens, targets): the same on every rank, a pure function of the step."""
    tokens = torch.randint(0, s.vocab, (size, s.context + 1), generator=torch.Generator().manual_seed(step))
    return tokens[:, :-1], tokens[:, 1:]
