"""Gathers the outputs of per-head VNodes in head order and applies the output projection."""

import torch
from torch import nn


class ConcatHeads(nn.Module):
    def __init__(self, dim: int, heads: int, head_dim: int | list[int]) -> None:
        super().__init__()
        widths = list(head_dim) if isinstance(head_dim, list) else [head_dim] * heads
        self.proj = nn.Linear(sum(widths), dim, bias=False)

    def reset_parameters(self, generator: torch.Generator) -> None:
        with torch.no_grad():
            self.proj.weight.normal_(0.0, 0.02, generator=generator)

    def forward(self, *heads: torch.Tensor) -> torch.Tensor:
        return self.proj(torch.cat(heads, dim=-1))  # (B, T, sum of widths) -> (B, T, dim)
