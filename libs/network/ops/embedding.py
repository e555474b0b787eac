"""embedding: token ids (B, T) -> vectors (B, T, dim); its weight may be tied to an LM head."""

from pydantic import Field

from .spec import OpParams, Problem, width_preserving


# Rows of the vocabulary per shard: a larger embedding and its tied LM head run as shards of this
# many rows (`computeall.network.vocab_split`), which the allocator may place on different PNodes.
SHARD_ROWS = 32768


class EmbeddingParams(OpParams):
    vocab_size: int = Field(..., ge=2)
    dim: int = Field(..., ge=1)
    shard_rows: int = Field(SHARD_ROWS, ge=1, description="rows per vocabulary shard (computeall.network.vocab_split)")


def check(p: EmbeddingParams, inputs: list[str]) -> list[Problem]:
    return [] if inputs == ["data.tokens"] else [Problem("inputs", "an embedding reads data.tokens")]


OP = width_preserving(
    name="embedding",
    params=EmbeddingParams,
    param_count=lambda p: p.vocab_size * p.dim,
    check=check,
    flops_per_token=lambda p, site: 2.0 * p.dim,  # a lookup, not a matmul
    activation_elements=lambda p, site: site.features,  # its output
    module="computeall.tensorcore.ops.embedding:Embedding",
    llama="embedding",
    example={"vocab_size": 16, "dim": 8},
    param_group="embedding",  # the tied LM head's weight is this one
    # backward makes its weight's gradient dense and adds it: one weight-sized gradient more
    working_bytes=lambda p, site, tokens, element: p.vocab_size * p.dim * element,
)
