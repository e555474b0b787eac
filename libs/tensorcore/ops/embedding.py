import torch
from torch import nn


class Embedding(nn.Module):
    """Token ids (B, T) -> vectors (B, T, dim). Its weight may be tied to an LM head."""

    def __init__(self, vocab_size: int, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(vocab_size, dim))

    def reset_parameters(self, generator: torch.Generator) -> None:
        with torch.no_grad():
            self.weight.normal_(0.0, 0.02, generator=generator)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.weight[tokens]  # (B, T, dim)
