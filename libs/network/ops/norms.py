"""rmsnorm and layernorm: per-token normalisation over `dim` features."""

from pydantic import Field

from .spec import LlamaPart, OpParams, OpSpec, no_shape_rules, weights_flops, width_preserving


class NormParams(OpParams):
    dim: int = Field(..., ge=1)
    eps: float = Field(1e-5, gt=0)


def _norm(name: str, module: str, weights_per_feature: int, llama: LlamaPart | None, fp32_kept) -> OpSpec:
    def param_count(p: NormParams) -> int:
        return weights_per_feature * p.dim

    return width_preserving(
        name=name,
        params=NormParams,
        param_count=param_count,
        check=no_shape_rules,
        flops_per_token=weights_flops(param_count),
        activation_elements=lambda p, site: site.features,
        fp32_activation_elements=fp32_kept,
        module=f"computeall.tensorcore.ops.norms:{module}",
        example={"dim": 8},
        param_group="norm",
        llama=llama,
        # it normalises in fp32 whatever its precision: five fp32 widths per token
        working_bytes=lambda p, site, tokens, element: 5 * site.features * tokens * 4,
    )


# a scale; keeps its input and one fp32 statistic a token (`RMSNormFunction`)
RMSNORM = _norm("rmsnorm", "RMSNorm", 1, llama="norm", fp32_kept=lambda p, site, upcast: 1)
# a scale and a bias; keeps its output, what it normalised in fp32, and below fp32 its input's fp32 copy
LAYERNORM = _norm("layernorm", "LayerNorm", 2, llama=None,
                  fp32_kept=lambda p, site, upcast: (2 if upcast else 1) * site.features)
