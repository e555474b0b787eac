"""tied_lm_head_ce: the loss, cross-entropy of x @ embedding.T against the targets."""

from pydantic import Field

from .embedding import SHARD_ROWS
from .spec import OpParams, Site, TiedWeight, loss_head, targets_second

LOGITS_CHUNK_ELEMENTS = 8 * 1024 * 1024  # computeall.kernels.lce_chunked.CHUNK_ELEMENTS: one fp32 chunk of logits


class TiedHeadParams(OpParams):
    dim: int = Field(..., ge=1)
    vocab_size: int = Field(..., ge=2)
    shard_rows: int = Field(SHARD_ROWS, ge=1, description="the embedding's: its softmax runs shard by shard beyond it")

    @property
    def sharded(self) -> bool:
        return self.vocab_size > self.shard_rows


def working_bytes(p: TiedHeadParams, site: Site, tokens: int, element: int) -> int:
    """The fused head's forward (it computes the gradients there): fp32 logits a chunk of rows at a
    time (the next chunk's made before the last is freed), the weight's gradient accumulated in fp32,
    below fp32 an fp32 copy of the weight and of its input; and the weight's gradient it keeps for
    the embedding until the micro-batch's backward."""
    rows = max(1, min(tokens, LOGITS_CHUNK_ELEMENTS // p.vocab_size))
    chunks = 1 if rows >= tokens else 2
    widened = (p.vocab_size + tokens) * p.dim * 4 if element < 4 else 0
    kept = p.vocab_size * p.dim * element
    return chunks * rows * p.vocab_size * 4 + p.vocab_size * p.dim * 4 + widened + kept


OP = loss_head(
    name="tied_lm_head_ce",
    params=TiedHeadParams,
    param_count=lambda p: 0,  # its weight is the embedding's
    check=targets_second("tied_lm_head_ce"),
    # a sharded head computes its logits twice: in forward for the statistics, in backward for the gradients
    flops_per_token=lambda p, site: (8.0 if p.sharded else 6.0) * p.vocab_size * p.dim,
    activation_elements=lambda p, site: p.dim,  # its input's gradient, made in forward (the weight's: `working_bytes`)
    module="computeall.tensorcore.ops.tied_head:TiedLMHeadCE",
    example={"dim": 8, "vocab_size": 16},
    tie=TiedWeight(op="embedding", same=("vocab_size", "dim", "shard_rows")),
    working_bytes=working_bytes,
)
