"""tied_lm_head_ce: the loss, cross-entropy of x @ embedding.T against the targets."""

from pydantic import Field

from .embedding import SHARD_ROWS
from .spec import OpParams, Site, TiedWeight, loss_head, targets_second

# One chunk of the fused head's fp32 logits is at most 8 MiB (`computeall.kernels.lce_chunked`), and no
# more elements than a quarter of the weight's, so that its bytes a parameter do not grow as a network
# shrinks. Measured (int8-sr, bf16, batch 1): seed-64heads' 32 MiB chunks made 48 MiB of its head's
# peak, 8 MiB chunks cost 1-5% of a step, 4 MiB 11%; tiny-gpt's 64-row chunks cost nothing.
LOGITS_CHUNK_ELEMENTS = 2 * 1024 * 1024


def logits_chunk_rows(vocab: int, dim: int, tokens: int) -> int:
    """How many tokens' logits the fused head makes at once."""
    return max(1, min(tokens, LOGITS_CHUNK_ELEMENTS // vocab, dim // 4))


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
    below fp32 an fp32 copy of the weight and of its input. The weight's gradient it keeps for the
    embedding until the micro-batch's backward takes the fp32 sum's place block by block
    (`lce_chunked.WeightGradient`): never more than the sum it replaces."""
    rows = logits_chunk_rows(p.vocab_size, p.dim, tokens)
    chunks = 1 if rows >= tokens else 2
    widened = (p.vocab_size + tokens) * p.dim * 4 if element < 4 else 0
    return chunks * rows * p.vocab_size * 4 + p.vocab_size * p.dim * 4 + widened


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
