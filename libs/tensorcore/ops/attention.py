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


def forward_multi_head_cached(module: nn.Module, x: torch.Tensor, cache, vid: str) -> torch.Tensor:
    """Sampling (`OpSpec.generation` "kv_cache") of an op with `split_heads` and `proj` (attention, fused
    heads): the new positions x (B, t, dim) attend over every cached one of `cache`
    (`computeall.tensorcore.generation.KVCache`, which keeps only the key/value heads)."""
    B, t, _ = x.shape
    q, k, v = module.split_heads(x)  # (B, H, t, hd), (B, KV, t, hd), (B, KV, t, hd)
    y = cache.attend(vid, q, k, v, module.rope_base)
    return module.proj(y.transpose(1, 2).reshape(B, t, module.heads * module.head_dim))


class Attention(nn.Module):
    """Causal multi-head self-attention with RoPE, all heads in one VNode.

    qkv.weight rows are [q (heads * hd); k (kv_heads * hd); v (kv_heads * hd)]. With fewer key/value
    heads than query heads (grouped-query attention), query head h reads key/value head
    h // (heads / kv_heads), as Llama's `repeat_kv` and SDPA's `enable_gqa` do.
    """

    def __init__(self, dim: int, heads: int, kv_heads: int | None = None, rope_base: float = 10000.0) -> None:
        super().__init__()
        self.heads = heads
        self.kv_heads = kv_heads or heads
        self.head_dim = dim // heads
        self.rope_base = rope_base
        self.qkv = nn.Linear(dim, (heads + 2 * self.kv_heads) * self.head_dim, bias=False)
        self.proj = nn.Linear(dim, dim, bias=False)

    def reset_parameters(self, generator: torch.Generator) -> None:
        with torch.no_grad():
            self.qkv.weight.normal_(0.0, 0.02, generator=generator)
            self.proj.weight.normal_(0.0, 0.02, generator=generator)

    def split_heads(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x (B, T, dim) -> q (B, heads, T, hd), k and v (B, kv_heads, T, hd), before RoPE."""
        B, T, _ = x.shape
        hd = self.head_dim
        q, k, v = self.qkv(x).split([self.heads * hd, self.kv_heads * hd, self.kv_heads * hd], dim=-1)
        return (q.view(B, T, self.heads, hd).transpose(1, 2), k.view(B, T, self.kv_heads, hd).transpose(1, 2),
                v.view(B, T, self.kv_heads, hd).transpose(1, 2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.split_heads(x)
        cos, sin = rope_tables(T, self.head_dim, self.rope_base, x.device)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if self.kv_heads != self.heads:  # each key/value head serves its group of query heads
            k, v = (t.repeat_interleave(self.heads // self.kv_heads, dim=1) for t in (k, v))
        y = flash_attention(q, k, v, causal=True, impl=attention_impl(x.device, self.head_dim))  # (B, H, T, hd)
        return self.proj(y.transpose(1, 2).reshape(B, T, C))

    forward_cached = forward_multi_head_cached
