"""lm_head_ce: the loss, cross-entropy of x @ W.T against the targets, with the head's own weight W
(an untied head; `tied_lm_head_ce` reads the embedding's instead)."""

from pydantic import Field

from .spec import OpParams, OpSpec, Problem


class LMHeadParams(OpParams):
    dim: int = Field(..., ge=1)
    vocab_size: int = Field(..., ge=2)


def check(p: LMHeadParams, inputs: list[str]) -> list[Problem]:
    if inputs[1:] != ["data.targets"]:
        return [Problem("inputs", "the second input of lm_head_ce is data.targets")]
    return []


OP = OpSpec(
    name="lm_head_ce",
    params=LMHeadParams,
    n_inputs=2,
    out_features=lambda p: 1,  # the loss
    in_features=lambda p: p.dim,
    param_count=lambda p: p.vocab_size * p.dim,
    check=check,
    flops_per_token=lambda p, site: 6.0 * p.vocab_size * p.dim,
    activation_elements=lambda p, site: 4 * p.dim,
    module="computeall.tensorcore.ops.tied_head:LMHeadCE",
    generation="logits",
    llama="head",
    example={"dim": 8, "vocab_size": 16},
    is_loss=True,
)
