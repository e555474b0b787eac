"""tied_lm_head_ce: the loss, cross-entropy of x @ embedding.T against the targets."""

from pydantic import Field

from .embedding import SHARD_ROWS
from .spec import OpParams, OpSpec, Problem, TiedWeight


class TiedHeadParams(OpParams):
    dim: int = Field(..., ge=1)
    vocab_size: int = Field(..., ge=2)
    shard_rows: int = Field(SHARD_ROWS, ge=1, description="the embedding's: its softmax runs shard by shard beyond it")

    @property
    def sharded(self) -> bool:
        return self.vocab_size > self.shard_rows


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
    # a sharded head computes its logits twice: in forward for the statistics, in backward for the gradients
    flops_per_token=lambda p, site: (8.0 if p.sharded else 6.0) * p.vocab_size * p.dim,
    activation_elements=lambda p, site: 4 * p.dim,
    module="computeall.tensorcore.ops.tied_head:TiedLMHeadCE",
    example={"dim": 8, "vocab_size": 16},
    is_loss=True,
    tie=TiedWeight(op="embedding", same=("vocab_size", "dim", "shard_rows")),
)
