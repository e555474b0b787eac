"""tied_lm_head_ce: the loss, cross-entropy of x @ embedding.T against the targets."""

from pydantic import Field

from .spec import OpParams, OpSpec, Problem, TiedWeight


class TiedHeadParams(OpParams):
    dim: int = Field(..., ge=1)
    vocab_size: int = Field(..., ge=2)


def check(p: TiedHeadParams, inputs: list[str]) -> list[Problem]:
    if inputs[1:] != ["data.targets"]:
        return [Problem("inputs", "the second input of tied_lm_head_ce is data.targets")]
    return []


OP = OpSpec(
    name="tied_lm_head_ce",
    params=TiedHeadParams,
    n_inputs=2,
    out_features=lambda p: 1,  # the loss
    in_features=lambda p: p.dim,
    param_count=lambda p: 0,  # its weight is the embedding's
    check=check,
    flops_per_token=lambda p, site: 6.0 * p.vocab_size * p.dim,
    activation_elements=lambda p, site: 4 * p.dim,
    module="computeall.tensorcore.ops.tied_head:TiedLMHeadCE",
    example={"dim": 8, "vocab_size": 16},
    is_loss=True,
    tie=TiedWeight(op="embedding", same=("vocab_size", "dim")),
)
