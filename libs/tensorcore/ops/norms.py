import torch
import torch.nn.functional as F
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def reset_parameters(self, generator: torch.Generator) -> None:
        with torch.no_grad():
            self.weight.fill_(1.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return RMSNormFunction.apply(x, self.weight, self.eps)


class RMSNormFunction(torch.autograd.Function):
    """x * rsqrt(mean(x^2) + eps) * weight, in fp32 whatever the VNode's precision: torch's own rms_norm
    (on the CPU: these very operations) and its autograd's bits, but it keeps for its backward only its
    input as it came and one fp32 statistic a token, where autograd keeps the input's fp32 copy and the
    normalised input in fp32 (4 bytes an element each): the backward recomputes them."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        x32 = x.float()
        rstd = x32.pow(2).mean(-1, keepdim=True).add(eps).rsqrt()
        ctx.save_for_backward(x, weight, rstd)
        return (x32 * rstd * weight.float()).to(x.dtype)

    @staticmethod
    def backward(ctx, grad_y: torch.Tensor):
        # autograd's chain rule through the forward's operations, in its order: the same bits
        x, weight, rstd = ctx.saved_tensors
        x32, g = x.float(), grad_y.float()
        grad_weight = (g * (x32 * rstd)).sum(tuple(range(x.dim() - 1))).to(weight.dtype)
        g_normalized = g * weight.float()
        g_rstd = (g_normalized * x32).sum(-1, keepdim=True)
        g_mean = (-0.5 * g_rstd * rstd.pow(3)).expand(x32.shape) / x32.shape[-1]
        grad_x = (g_normalized * rstd + g_mean * (2 * x32)).to(x.dtype)
        return grad_x, grad_weight, None


class LayerNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim))

    def reset_parameters(self, generator: torch.Generator) -> None:
        with torch.no_grad():
            self.weight.fill_(1.0)
            self.bias.zero_()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x.float(), self.weight.shape, self.weight.float(), self.bias.float(), self.eps).to(x.dtype)
