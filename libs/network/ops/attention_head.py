"""attention_head: one attention head as its own VNode (its q/k/v slice, RoPE, causal attention)."""

from pydantic import Field

from .spec import OpParams, Problem, attention_flops, reads_dim


class AttentionHeadParams(OpParams):
    """One attention head: its own q/k/v projection slice, RoPE, causal attention."""

    dim: int = Field(..., ge=1)
    head_dim: int = Field(..., ge=2)
    head: int = Field(..., ge=0, description="the head's index in its block, 0..heads-1")
    rope_base: float = Field(10000.0, gt=0)


def check(p: AttentionHeadParams, inputs: list[str]) -> list[Problem]:
    return [Problem("head_dim", f"head size {p.head_dim} must be even for RoPE")] if p.head_dim % 2 else []


def param_count(p: AttentionHeadParams) -> int:
    return 3 * p.dim * p.head_dim  # its q, k and v slices; the projection is the concat's


OP = reads_dim(
    name="attention_head",
    params=AttentionHeadParams,
    out_features=lambda p: p.head_dim,
    param_count=param_count,
    check=check,
    flops_per_token=attention_flops(param_count, lambda p: p.head_dim),  # as attention, for one head
    activation_elements=lambda p, site: 6 * site.features,
    module="computeall.tensorcore.ops.attention_head:AttentionHead",
    generation="kv_cache",
    example={"dim": 8, "head_dim": 4, "head": 0},
)
