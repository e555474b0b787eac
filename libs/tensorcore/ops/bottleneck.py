import torch
from torch import nn


def identity_path(dim: int, rank: int) -> torch.Tensor:
    """The (rank, dim) projection both halves of a bottleneck start from: row j averages the features
    j, j + rank, j + 2 rank, ... with orthonormal rows, so up(down(x)) starts as x's orthogonal
    projection onto `rank` directions (the low-rank identity path). A function of the shape only:
    the two halves are separate VNodes with separate seeds and still start as each other's transpose."""
    group = torch.arange(dim) % rank  # the feature's row
    size = torch.bincount(group, minlength=rank).float()
    path = torch.zeros(rank, dim)
    path[group, torch.arange(dim)] = size[group].rsqrt()
    return path


class BottleneckDown(nn.Module):
    """The residual stream (B, T, dim) -> (B, T, rank): what crosses a cut."""

    def __init__(self, dim: int, rank: int) -> None:
        super().__init__()
        self.proj = nn.Linear(dim, rank, bias=False)

    def reset_parameters(self, generator: torch.Generator) -> None:
        with torch.no_grad():
            self.proj.weight.copy_(identity_path(self.proj.in_features, self.proj.out_features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x)


class BottleneckUp(nn.Module):
    """(B, T, rank) -> (B, T, dim): the residual stream again, on the far side of a cut."""

    def __init__(self, dim: int, rank: int) -> None:
        super().__init__()
        self.proj = nn.Linear(rank, dim, bias=False)

    def reset_parameters(self, generator: torch.Generator) -> None:
        with torch.no_grad():
            self.proj.weight.copy_(identity_path(self.proj.out_features, self.proj.in_features).T)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.proj(z)
