"""A tied embedding and LM head split by vocabulary (see computeall.network.vocab_split): four ops.

- embedding_shard: rows lo..hi of the embedding; the vectors of the tokens among them, zeros elsewhere.
- embedding_gather: every token's vector from the shard that holds it (the embedding's output).
- lm_head_shard: tied to its embedding shard; per token its statistics over its rows (`STATS`).
- sharded_ce: the loss, from every shard's statistics folded in shard order.
"""

from __future__ import annotations

from pydantic import Field

from .embedding import SHARD_ROWS
from .spec import OpParams, OpSpec, Problem, TiedWeight, width_preserving

STATS = 3  # per token: the shard's largest logit, its sum of exp(logit - largest), the target's logit
_GATHER, _CE = "embedding_gather", "sharded_ce"
_DATA = {_GATHER: "data.tokens", _CE: "data.targets"}  # what the combining ops read besides the shards


class VocabParams(OpParams):
    """The whole table's size and how it is cut: what every op of a split agrees on."""

    vocab_size: int = Field(..., ge=2)
    dim: int = Field(..., ge=1)
    shard_rows: int = Field(SHARD_ROWS, ge=1)

    @property
    def shards(self) -> int:
        return -(-self.vocab_size // self.shard_rows)

    def bounds(self, shard: int) -> tuple[int, int]:
        """Rows lo..hi of shard `shard`; the last may be shorter."""
        lo = shard * self.shard_rows
        return lo, min(lo + self.shard_rows, self.vocab_size)


class ShardParams(VocabParams):
    shard: int = Field(..., ge=0, description="which shard of rows, 0..shards-1")

    @property
    def rows(self) -> int:
        lo, hi = self.bounds(self.shard)
        return hi - lo


def _check_shard(p: ShardParams, inputs: list[str]) -> list[Problem]:
    if p.shard >= p.shards:
        return [Problem("shard", f"shard {p.shard} is past the last of {p.shards} shards of {p.shard_rows} rows")]
    return []


def _check_gather(p: VocabParams, inputs: list[str]) -> list[Problem]:
    if inputs[-1:] != [_DATA[_GATHER]]:
        return [Problem("inputs", f"the last input is {_DATA[_GATHER]}")]
    if len(set(inputs)) != len(inputs):
        return [Problem("inputs", "a shard is listed twice")]
    return []


def _check_head_shard(p: ShardParams, inputs: list[str]) -> list[Problem]:
    if inputs[1:] != ["data.targets"]:
        return [Problem("inputs", "the second input of lm_head_shard is data.targets")]
    return _check_shard(p, inputs)


def _check_ce(p: VocabParams, inputs: list[str]) -> list[Problem]:
    if inputs[-1:] != [_DATA[_CE]]:
        return [Problem("inputs", f"the last input is {_DATA[_CE]}")]
    return []

EMBEDDING_SHARD = width_preserving(
    name="embedding_shard",
    params=ShardParams,
    param_count=lambda p: p.rows * p.dim,
    check=lambda p, inputs: _check_shard(p, inputs) + (
        [] if inputs == ["data.tokens"] else [Problem("inputs", "an embedding shard reads data.tokens")]),
    flops_per_token=lambda p, site: 2.0 * p.dim,
    activation_elements=lambda p, site: 2 * site.features,
    module="computeall.tensorcore.ops.vocab_shards:EmbeddingShard",
    example={"vocab_size": 16, "dim": 8, "shard_rows": 6, "shard": 2},
    param_group="embedding",
)

EMBEDDING_GATHER = OpSpec(
    name=_GATHER,
    params=VocabParams,
    n_inputs=lambda p: p.shards + 1,
    out_features=lambda p: p.dim,
    in_features=lambda p: p.dim,
    param_count=lambda p: 0,
    check=_check_gather,
    flops_per_token=lambda p, site: float(p.shards * p.dim),
    activation_elements=lambda p, site: 1,  # the tokens' shard: its backward reads no vector
    module="computeall.tensorcore.ops.vocab_shards:EmbeddingGather",
    example={"vocab_size": 16, "dim": 8, "shard_rows": 6},
    backward_reads_inputs=False,
)

LM_HEAD_SHARD = OpSpec(
    name="lm_head_shard",
    params=ShardParams,
    n_inputs=2,
    out_features=lambda p: STATS,
    in_features=lambda p: p.dim,
    param_count=lambda p: 0,  # its weight is its embedding shard's
    check=_check_head_shard,
    # logits in forward for the statistics, again in backward for the gradients
    flops_per_token=lambda p, site: 8.0 * p.rows * p.dim,
    activation_elements=lambda p, site: p.dim + STATS,  # its input, to recompute the logits from, and its statistics
    module="computeall.tensorcore.ops.vocab_shards:LMHeadShard",
    generation=None,  # it reads the targets, which sampling has not
    example={"vocab_size": 16, "dim": 8, "shard_rows": 6, "shard": 2},
    tie=TiedWeight(op="embedding_shard", same=("vocab_size", "dim", "shard_rows", "shard")),
    fp32_output=True,  # the statistics, and the coefficients that come back as their gradient
)

SHARDED_CE = OpSpec(
    name=_CE,
    params=VocabParams,
    n_inputs=lambda p: p.shards + 1,
    out_features=lambda p: 1,  # the loss
    in_features=lambda p: STATS,
    param_count=lambda p: 0,
    check=_check_ce,
    flops_per_token=lambda p, site: 12.0 * p.shards,
    activation_elements=lambda p, site: STATS * p.shards,
    module="computeall.tensorcore.ops.vocab_shards:ShardedCE",
    generation=None,  # no logits: a loss folded from the shards' statistics
    example={"vocab_size": 16, "dim": 8, "shard_rows": 6},
    is_loss=True,
)
