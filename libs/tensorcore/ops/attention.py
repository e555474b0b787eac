import torch
from torch import nn

from computeall.kernels import flash_attention

from ..kernel_choice import attention_impl


def rope_tables(T: int, head_dim: int, base: float, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim))
    angles = torch.outer(torch.arange(T, device=device, dtype=torch.float32), inv_freq)  # (T, head_dim/2)
    return angles.cos(), angles.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate pairs (x[2i], x[2i+1]) of each head by position-dependent angles. x: (B, H, T, hd)."""
    x1, x2 = x.float().unflatten(-1, (-1, 2)).unbind(-1)  # (B, H, T, hd/2) each
    rotated = torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)
    return rotated.flatten(-2).to(x.dtype)


class Attention(nn.Module):
    """Causal multi-head self-attention with RoPE, all heads in one VNode."""

    def __init__(self, dim: int, heads: int, rope_base: float = 10000.0) -> None:
        super().__init__()
        self.heads = heads
        self.rope_base = rope_base
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.proj = nn.Linear(dim, dim, bias=False)

    def reset_parameters(self, generator: torch.Generator) -> None:
        with torch.no_grad():
            self.qkv.weight.normal_(0.0, 0.02, generator=generator)
            self.proj.weight.normal_(0.0, 0.02, generator=generator)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=-1)  # (B, T, C) each
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))  # (B, H, T, hd)
        cos, sin = rope_tables(T, C // self.heads, self.rope_base, x.device)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        y = flash_attention(q, k, v, causal=True, impl=attention_impl(x.device, C // self.heads))  # (B, H, T, hd)
        return self.proj(y.transpose(1, 2).reshape(B, T, C))
