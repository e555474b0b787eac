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
        return SwiGLUFunction.apply(x, self.gate_up.weight, self.down.weight)  # (B, T, dim)


def _hidden(gate_up: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(gate, up, silu(gate)) of gate_up's output."""
    gate, up = gate_up.chunk(2, dim=-1)
    return gate, up, F.silu(gate)


class SwiGLUFunction(torch.autograd.Function):
    """The MLP keeping for its backward only its input and gate_up's output (dim + 2 hidden a token):
    silu(gate) and the product, which autograd would keep as well (2 hidden more), are recomputed in
    the backward from gate and up, elementwise, the same bits as the forward's."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, w_gate_up: torch.Tensor, w_down: torch.Tensor) -> torch.Tensor:
        gate_up = F.linear(x, w_gate_up)
        _, up, silu = _hidden(gate_up)
        ctx.save_for_backward(x, gate_up, w_gate_up, w_down)
        return F.linear(silu * up, w_down)

    @staticmethod
    def backward(ctx, grad_y: torch.Tensor):
        x, gate_up, w_gate_up, w_down = ctx.saved_tensors
        need_x, need_gate_up, need_down = ctx.needs_input_grad
        gate, up, silu = _hidden(gate_up)
        dim, hidden = x.shape[-1], up.shape[-1]
        dy = grad_y.reshape(-1, dim)
        grad_down = dy.t().mm((silu * up).reshape(-1, hidden)) if need_down else None
        d_product = dy.mm(w_down).view(up.shape)
        d_gate = torch.ops.aten.silu_backward(d_product * up, gate)
        d_gate_up = torch.cat([d_gate, d_product * silu], dim=-1).reshape(-1, 2 * hidden)
        grad_gate_up = d_gate_up.t().mm(x.reshape(-1, dim)) if need_gate_up else None
        grad_x = d_gate_up.mm(w_gate_up).view(x.shape) if need_x else None
        return grad_x, grad_gate_up, grad_down
