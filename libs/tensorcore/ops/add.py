import torch
from torch import nn


class Add(nn.Module):
    """The residual connection: two inputs of the same shape."""

    def reset_parameters(self, generator: torch.Generator) -> None:
        pass

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a + b
