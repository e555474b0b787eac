"""Per-head attention VNodes fused into one: all heads in one batched flash-attention call.

Weights are the per-head weights concatenated in head order, laid out like `Attention`:
qkv.weight (3*H*hd, dim) holds rows [q_0..q_{H-1}; k_0..k_{H-1}; v_0..v_{H-1}] and
proj.weight (dim, H*hd) is the concat VNode's projection unchanged. So the mapping to and
from the per-head form (computeall.tensorcore.head_state_mapping) is pure and exact, and
with H*hd == dim the fused weights are also those of a plain `attention` VNode.
"""

from typing import Callable

import torch
from torch import nn

from computeall.kernels import flash_attention

from .attention import apply_rope, forward_multi_head_cached, rope_tables

try:  # a fixed implementation per device and shape, so every PNode computes the same numbers
    from ..kernel_choice import attention_impl
except ImportError:  # pragma: no cover - before the kernel-choice table exists
    def attention_impl(device: torch.device, head_dim: int) -> str:
        return "sdpa"
from .attention_head import init_head_qkv


def qkv_from_heads(head_weights: list[torch.Tensor]) -> torch.Tensor:
    """Per-head (3*hd, dim) [q; k; v] weights, in head order -> the fused (3*H*hd, dim) weight."""
    parts = [w.chunk(3, dim=0) for w in head_weights]  # per head: (q, k, v), each (hd, dim)
    return torch.cat([p[j] for j in range(3) for p in parts], dim=0)


def qkv_to_heads(fused: torch.Tensor, heads: int) -> list[torch.Tensor]:
    """Inverse of `qkv_from_heads`."""
    q, k, v = (t.chunk(heads, dim=0) for t in fused.chunk(3, dim=0))
    return [torch.cat((q[h], k[h], v[h]), dim=0) for h in range(heads)]


class FusedAttentionHeads(nn.Module):
    def __init__(
        self, dim: int, heads: int, head_dim: int, rope_base: float = 10000.0, head_ids: list[str] | None = None
    ) -> None:
        super().__init__()
        self.heads = heads
        self.kv_heads = heads  # one key/value head per query head, as the per-head VNodes it stands for
        self.head_dim = head_dim
        self.rope_base = rope_base
        self.head_ids = list(head_ids or [])
        self.qkv = nn.Linear(dim, 3 * heads * head_dim, bias=False)
        self.proj = nn.Linear(heads * head_dim, dim, bias=False)

    def reset_parameters(self, generator: torch.Generator) -> None:
        """Without head ids (written as fused in the YAML): one draw from this VNode's seed."""
        with torch.no_grad():
            self.qkv.weight.normal_(0.0, 0.02, generator=generator)
            self.proj.weight.normal_(0.0, 0.02, generator=generator)

    def reset_parameters_from(self, generator: torch.Generator, seed_of: Callable[[str], torch.Generator],
                              vid: str) -> None:
        """Each head's slice from that head's VNode seed, the projection from this VNode's own (the concat's id):
        the same numbers the unfused network starts from."""
        if not self.head_ids:
            self.reset_parameters(generator)
            return
        dim = self.qkv.in_features
        with torch.no_grad():
            self.qkv.weight.copy_(qkv_from_heads([init_head_qkv(dim, self.head_dim, seed_of(h)) for h in self.head_ids]))
            self.proj.weight.normal_(0.0, 0.02, generator=generator)

    def split_heads(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x (B, T, dim) -> q, k, v (B, H, T, hd) each, before RoPE."""
        B, T, _ = x.shape
        q, k, v = self.qkv(x).split(self.heads * self.head_dim, dim=-1)  # (B, T, H*hd) each
        return tuple(t.view(B, T, self.heads, self.head_dim).transpose(1, 2) for t in (q, k, v))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, _ = x.shape
        q, k, v = self.split_heads(x)
        cos, sin = rope_tables(T, self.head_dim, self.rope_base, x.device)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        y = flash_attention(q, k, v, causal=True, impl=attention_impl(x.device, self.head_dim))  # (B, H, T, hd): every head in one call
        return self.proj(y.transpose(1, 2).reshape(B, T, self.heads * self.head_dim))

    forward_cached = forward_multi_head_cached
