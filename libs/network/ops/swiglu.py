"""swiglu_mlp: down(silu(gate(x)) * up(x)), the MLP of LLaMA-style blocks."""

from pydantic import Field

from .spec import OpParams, Site, no_shape_rules, weights_flops, width_preserving


class SwiGLUParams(OpParams):
    dim: int = Field(..., ge=1)
    hidden: int = Field(..., ge=1)


def param_count(p: SwiGLUParams) -> int:
    return 3 * p.dim * p.hidden  # gate, up and down


def activation_elements(p: SwiGLUParams, site: Site) -> int:
    # its input, and gate and up (one matmul's output): silu(gate) and the product are recomputed in its
    # backward (`computeall.tensorcore.ops.swiglu.SwiGLUFunction`)
    return site.features + 2 * p.hidden


OP = width_preserving(
    name="swiglu_mlp",
    params=SwiGLUParams,
    param_count=param_count,
    check=no_shape_rules,
    flops_per_token=weights_flops(param_count),
    activation_elements=activation_elements,
    module="computeall.tensorcore.ops.swiglu:SwiGLU",
    llama="mlp",
    # in backward silu(gate), the product and the gradients of gate, up and the product: four and a half hidden widths
    working_bytes=lambda p, site, tokens, element: int(4.5 * p.hidden * tokens * element),
    example={"dim": 8, "hidden": 12},
)
