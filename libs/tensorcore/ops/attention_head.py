"""One attention head as its own VNode: its q/k/v projection slice, RoPE, causal attention."""

import torch
from torch import nn

from computeall.kernels import flash_attention

from .attention import apply_rope, rope_tables

try:  # a fixed implementation per device and shape, so every PNode computes the same numbers
    from ..kernel_choice import attention_impl
except ImportError:  # pragma: no cover - before the kernel-choice table exists
    def attention_impl(device: torch.device, head_dim: int) -> str:
        return "sdpa"


def init_head_qkv(dim: int, head_dim: int, generator: torch.Generator) -> torch.Tensor:
    """A head's q/k/v weight (3*head_dim, dim), rows [q; k; v], as the head's VNode seed draws it.

    The fused VNode draws each head's slice with this same function and that head's seed.
    """
    return torch.empty(3 * head_dim, dim).normal_(0.0, 0.02, generator=generator)


class AttentionHead(nn.Module):
    def __init__(self, dim: int, head_dim: int, head: int, rope_base: float = 10000.0) -> None:
        super().__init__()
        self.head_dim = head_dim
        self.head = head
        self.rope_base = rope_base
        self.qkv = nn.Linear(dim, 3 * head_dim, bias=False)

    def reset_parameters(self, generator: torch.Generator) -> None:
        with torch.no_grad():
            self.qkv.weight.copy_(init_head_qkv(self.qkv.in_features, self.head_dim, generator))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, _ = x.shape
        q, k, v = (t.unsqueeze(1) for t in self.qkv(x).split(self.head_dim, dim=-1))  # (B, 1, T, hd) each
        cos, sin = rope_tables(T, self.head_dim, self.rope_base, x.device)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        return flash_attention(q, k, v, causal=True, impl=attention_impl(x.device, self.head_dim)).squeeze(1)  # (B, T, hd)

    def forward_cached(self, x: torch.Tensor, cache, vid: str) -> torch.Tensor:
        """Sampling: the new positions x (B, t, dim) attend over every cached one; (B, t, hd) for its concat VNode."""
        q, k, v = (z.unsqueeze(1) for z in self.qkv(x).split(self.head_dim, dim=-1))  # (B, 1, t, hd)
        return cache.attend(vid, q, k, v, self.rope_base).squeeze(1)
