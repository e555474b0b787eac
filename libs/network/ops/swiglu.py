"""swiglu_mlp: down(silu(gate(x)) * up(x)), the MLP of LLaMA-style blocks."""

from pydantic import Field

from .spec import OpParams, Site, no_shape_rules, weights_flops, width_preserving


class SwiGLUParams(OpParams):
    dim: int = Field(..., ge=1)
    hidden: int = Field(..., ge=1)


def param_count(p: SwiGLUParams) -> int:
    return 3 * p.dim * p.hidden  # gate, up and down


def activation_elements(p: SwiGLUParams, site: Site) -> int:
    # input and output, plus gate, up and their product in the hidden width (in units of `features`)
    return site.features * (2 + 3 * p.hidden // max(1, site.features))


OP = width_preserving(
    name="swiglu_mlp",
    params=SwiGLUParams,
    param_count=param_count,
    check=no_shape_rules,
    flops_per_token=weights_flops(param_count),
    activation_elements=activation_elements,
    module="computeall.tensorcore.ops.swiglu:SwiGLU",
    example={"dim": 8, "hidden": 12},
)
