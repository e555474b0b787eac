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


class _BottleneckHalf(nn.Module):
    """One half of a bottleneck: a projection without bias between the residual stream's `dim` features
    and `rank`, which starts as the identity path (`identity_path`, transposed for the up half)."""

    up: bool  # (B, T, rank) -> (B, T, dim), else (B, T, dim) -> (B, T, rank)

    def __init__(self, dim: int, rank: int) -> None:
        super().__init__()
        self.dim, self.rank = dim, rank
        self.proj = nn.Linear(rank, dim, bias=False) if self.up else nn.Linear(dim, rank, bias=False)

    def reset_parameters(self, generator: torch.Generator) -> None:
        path = identity_path(self.dim, self.rank)
        with torch.no_grad():
            self.proj.weight.copy_(path.T if self.up else path)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x)


class BottleneckDown(_BottleneckHalf):
    """The residual stream (B, T, dim) -> (B, T, rank): what crosses a cut."""

    up = False


class BottleneckUp(_BottleneckHalf):
    """(B, T, rank) -> (B, T, dim): the residual stream again, on the far side of a cut."""

    up = True
