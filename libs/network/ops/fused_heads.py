"""fused_attention_heads: per-head VNodes fused into one (see computeall.network.head_fusion)."""

from pydantic import Field

from .spec import OpParams, Problem, attention_flops, width_preserving


class FusedAttentionHeadsParams(OpParams):
    """Per-head VNodes fused into one (see computeall.network.head_fusion)."""

    dim: int = Field(..., ge=1)
    heads: int = Field(..., ge=1)
    head_dim: int = Field(..., ge=2)
    rope_base: float = Field(10000.0, gt=0)
    head_ids: list[str] = Field(default_factory=list, description="the per-head VNodes, in head order")

    @property
    def kv(self) -> int:
        """The key/value heads: one per query head, as the per-head VNodes it stands for (as `AttentionParams.kv`)."""
        return self.heads


def check(p: FusedAttentionHeadsParams, inputs: list[str]) -> list[Problem]:
    if p.head_dim % 2:
        return [Problem("head_dim", f"head size {p.head_dim} must be even for RoPE")]
    if p.head_ids and len(p.head_ids) != p.heads:
        return [Problem("head_ids", f"{len(p.head_ids)} ids for {p.heads} heads")]
    return []


def param_count(p: FusedAttentionHeadsParams) -> int:
    return 4 * p.heads * p.head_dim * p.dim  # every head's q, k, v and the output projection


OP = width_preserving(
    name="fused_attention_heads",
    params=FusedAttentionHeadsParams,
    param_count=param_count,
    check=check,
    flops_per_token=attention_flops(param_count, lambda p: p.heads * p.head_dim),  # as attention, over all heads
    activation_elements=lambda p, site: 6 * site.features,
    module="computeall.tensorcore.ops.fused_heads:FusedAttentionHeads",
    generation="kv_cache",
    llama="attention",
    example={"dim": 8, "heads": 2, "head_dim": 4},
)
