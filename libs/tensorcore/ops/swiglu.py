import torch
import torch.nn.functional as F
from torch import nn


class SwiGLU(nn.Module):
    """down(silu(gate(x)) * up(x)): the MLP of LLaMA-style blocks."""

    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.gate_up = nn.Linear(dim, 2 * hidden, bias=False)
        self.down = nn.Linear(hidden, dim, bias=False)

    def reset_parameters(self, generator: torch.Generator) -> None:
        with torch.no_grad():
            self.gate_up.weight.normal_(0.0, 0.02, generator=generator)
            self.down.weight.normal_(0.0, 0.02, generator=generator)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up(x).chunk(2, dim=-1)  # (B, T, hidden) each
        return self.down(F.silu(gate) * up)  # (B, T, dim)
