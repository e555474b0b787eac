"""attention: causal multi-head self-attention with RoPE, all heads in one VNode; grouped-query
attention when `kv_heads` < `heads` (each key/value head serves `heads / kv_heads` query heads)."""

from pydantic import Field

from .spec import OpParams, Problem, attention_flops, per_token_working, width_preserving


class AttentionParams(OpParams):
    dim: int = Field(..., ge=1)
    heads: int = Field(..., ge=1)
    kv_heads: int | None = Field(None, ge=1, description="key/value heads (grouped-query attention); default: heads")
    rope_base: float = Field(10000.0, gt=0)

    @property
    def head_dim(self) -> int:
        return self.dim // self.heads

    @property
    def kv(self) -> int:
        """The key/value heads: `kv_heads`, or one per query head."""
        return self.kv_heads or self.heads


def check(p: AttentionParams, inputs: list[str]) -> list[Problem]:
    if p.dim % p.heads:
        return [Problem("heads", f"dim {p.dim} is not divisible by {p.heads} heads")]
    if p.head_dim % 2:
        return [Problem("heads", f"head size {p.head_dim} must be even for RoPE")]
    if p.heads % p.kv:
        return [Problem("kv_heads", f"{p.heads} query heads do not split into groups over {p.kv} key/value heads; "
                                    f"use a divisor of {p.heads}")]
    return []


def param_count(p: AttentionParams) -> int:
    # q and the output projection (dim x dim each), k and v (dim x kv_heads * head_dim each)
    return 2 * p.dim * p.dim + 2 * p.dim * p.kv * p.head_dim


OP = width_preserving(
    name="attention",
    params=AttentionParams,
    param_count=param_count,
    check=check,
    flops_per_token=attention_flops(param_count, lambda p: p.dim),  # every query head
    activation_elements=lambda p, site: 8 * site.features,  # q, k, v, the heads' output, its projection, ...
    module="computeall.tensorcore.ops.attention:Attention",
    generation="kv_cache",
    llama="attention",
    working_bytes=per_token_working(10),  # q, k, v and their gradients, the tiled kernel's blocks
    example={"dim": 8, "heads": 2, "kv_heads": 1},
)
