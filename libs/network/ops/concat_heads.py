"""concat_heads: the outputs of per-head VNodes, in head order, through the output projection."""

from pydantic import Field

from .spec import OpParams, OpSpec, Problem, weights_flops


class ConcatHeadsParams(OpParams):
    """Gathers `heads` head outputs (in head order) and applies the output projection.

    `head_dim` is the width of every input, or a list with one width per input.
    """

    dim: int = Field(..., ge=1)
    heads: int = Field(..., ge=1)
    head_dim: int | list[int]

    def widths(self) -> list[int]:
        return list(self.head_dim) if isinstance(self.head_dim, list) else [self.head_dim] * self.heads


def check(p: ConcatHeadsParams, inputs: list[str]) -> list[Problem]:
    if isinstance(p.head_dim, list) and len(p.head_dim) != p.heads:
        return [Problem("head_dim", f"{len(p.head_dim)} widths for {p.heads} heads")]
    if any(w < 1 for w in p.widths()):
        return [Problem("head_dim", f"widths must be positive, got {p.head_dim}")]
    if len(set(inputs)) != len(inputs):
        return [Problem("inputs", "a head is listed twice")]
    return []


def param_count(p: ConcatHeadsParams) -> int:
    return sum(p.widths()) * p.dim


OP = OpSpec(
    name="concat_heads",
    params=ConcatHeadsParams,
    n_inputs=lambda p: p.heads,
    out_features=lambda p: p.dim,
    in_features=lambda p: p.widths(),
    in_field="head_dim",
    param_count=param_count,
    check=check,
    flops_per_token=weights_flops(param_count),
    activation_elements=lambda p, site: 2 * site.features,
    module="computeall.tensorcore.ops.concat_heads:ConcatHeads",
    example={"dim": 8, "heads": 2, "head_dim": 4},
)
