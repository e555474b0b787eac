"""attention: causal multi-head self-attention with RoPE, all heads in one VNode."""

from pydantic import Field

from .spec import OpParams, Problem, Site, per_token_working, width_preserving


class AttentionParams(OpParams):
    dim: int = Field(..., ge=1)
    heads: int = Field(..., ge=1)
    rope_base: float = Field(10000.0, gt=0)


def check(p: AttentionParams, inputs: list[str]) -> list[Problem]:
    if p.dim % p.heads:
        return [Problem("heads", f"dim {p.dim} is not divisible by {p.heads} heads")]
    if (p.dim // p.heads) % 2:
        return [Problem("heads", f"head size {p.dim // p.heads} must be even for RoPE")]
    return []


def param_count(p: AttentionParams) -> int:
    return 4 * p.dim * p.dim  # q, k, v and the output projection


def flops_per_token(p: AttentionParams, site: Site) -> float:
    # the weights, plus q.k and p.v over the context: causal halves it, backward doubles it
    return 6.0 * param_count(p) + 6.0 * site.context * p.dim


OP = width_preserving(
    name="attention",
    params=AttentionParams,
    param_count=param_count,
    check=check,
    flops_per_token=flops_per_token,
    activation_elements=lambda p, site: 8 * site.features,  # q, k, v, the heads' output, its projection, ...
    module="computeall.tensorcore.ops.attention:Attention",
    working_bytes=per_token_working(10),  # q, k, v and their gradients, the tiled kernel's blocks
    example={"dim": 8, "heads": 2},
)
