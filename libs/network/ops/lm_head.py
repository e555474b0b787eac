"""lm_head_ce: the loss, cross-entropy of x @ W.T against the targets, with the head's own weight W
(an untied head; `tied_lm_head_ce` reads the embedding's instead)."""

from pydantic import Field

from .spec import OpParams, loss_head, targets_second


class LMHeadParams(OpParams):
    dim: int = Field(..., ge=1)
    vocab_size: int = Field(..., ge=2)


OP = loss_head(
    name="lm_head_ce",
    params=LMHeadParams,
    param_count=lambda p: p.vocab_size * p.dim,
    check=targets_second("lm_head_ce"),
    flops_per_token=lambda p, site: 6.0 * p.vocab_size * p.dim,
    activation_elements=lambda p, site: 4 * p.dim,
    module="computeall.tensorcore.ops.tied_head:LMHeadCE",
    example={"dim": 8, "vocab_size": 16},
)
