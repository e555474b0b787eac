"""Vocabulary split: a tied embedding and LM head rewritten into shards of `shard_rows` rows.

A 128K-token vocabulary makes the embedding (and the LM head that reads its weight) larger than
a small PNode can hold, and tied weights must live together. So wherever the vocabulary is
larger than `shard_rows` (a parameter of both, part of the network's math), the session runs
them as shards of rows, each shard one unit of an embedding rows and the head's part over them:

    embed.shard<s>   embedding_shard  (rows s*shard_rows ..): the vectors of its tokens, zeros elsewhere
    embed            embedding_gather (the embedding's id): every token's vector from its shard
    head.shard<s>    lm_head_shard    tied to embed.shard<s>: per token, its softmax statistics
    head             sharded_ce       (the head's id): the loss, from the statistics in shard order

The allocator places the units like any other (on one PNode or several). The unsplit modules
compute shard by shard with the same functions (`computeall.kernels.lce_vocab`), and every shard
starts from its own seed in both forms, so split and unsplit are the same bits (with fp32 wires
into the head: a compressed one rounds each shard's gradient on its own edge). The rewrite is a
pure function of the network, never of the placement; `computeall.tensorcore.vocab_state_mapping`
maps state between the forms (a checkpoint or a Hugging Face model is stored unsplit).
"""

from __future__ import annotations

from dataclasses import dataclass

from .ops import ShardParams, TiedHeadParams, VocabParams
from .ops.embedding import OP as EMBEDDING
from .ops.tied_head import OP as TIED_HEAD
from .ops.vocab_shards import EMBEDDING_GATHER, EMBEDDING_SHARD, LM_HEAD_SHARD, SHARDED_CE
from .schema import NetworkSpec, VNodeSpec


def shard_id(vid: str, shard: int) -> str:
    """The id of shard `shard` of VNode `vid` (an embedding or its tied head)."""
    return f"{vid}.shard{shard}"


@dataclass(frozen=True)
class VocabGroup:
    """An embedding whose vocabulary runs in shards: `shard_ids[s]` holds rows `bounds[s]`."""

    embed: str  # the unsplit embedding's id, which the gather keeps
    shard_ids: tuple[str, ...]
    bounds: tuple[tuple[int, int], ...]


def _group(embed: str, p: VocabParams) -> VocabGroup:
    return VocabGroup(embed, tuple(shard_id(embed, s) for s in range(p.shards)),
                      tuple(p.bounds(s) for s in range(p.shards)))


def _vocab(v: VNodeSpec) -> VocabParams:
    """The vocabulary and its cut, as an embedding, its head, or a part of their split form declares them."""
    return VocabParams.model_validate({k: v.params[k] for k in VocabParams.model_fields if k in v.params})


def vocab_groups(spec: NetworkSpec) -> list[VocabGroup]:
    """The sharded embeddings of a network in either form: gathers of shards, or embeddings larger than a shard."""
    out = []
    for v in spec.vnodes:
        if v.op in (EMBEDDING_GATHER.name, EMBEDDING.name):
            p = _vocab(v)
            if p.shards > 1:
                out.append(_group(v.id, p))
    return out


def split_vocab(spec: NetworkSpec) -> tuple[NetworkSpec, list[str]]:
    """Rewrite every tied embedding and head whose vocabulary exceeds `shard_rows` into shards; a pure
    function. Returns the new network and one line per split, and per pair left alone and why."""
    by_id = {v.id: v for v in spec.vnodes}
    replaced: dict[str, list[VNodeSpec]] = {}
    lines = []
    for head in spec.vnodes:
        if head.op != TIED_HEAD.name or not TiedHeadParams.model_validate(head.params).sharded:
            continue
        embed = by_id[head.tie]
        p = _vocab(head)
        why = _refusal(spec, embed, head, p)
        if why:
            lines.append(f"left {embed.id} and {head.id} unsplit: {why}")
            continue
        replaced[embed.id], replaced[head.id] = _split(embed, head, p)
        lines.append(f"split {embed.id} and {head.id} by vocabulary into {p.shards} shards of {p.shard_rows} rows")
    if not replaced:
        return spec, lines
    vnodes = [w for v in spec.vnodes for w in replaced.get(v.id, [v.model_copy(deep=True)])]
    return NetworkSpec(name=spec.name, vocab_size=spec.vocab_size, context=spec.context, wire=spec.wire,
                       vnodes=vnodes), lines


def _refusal(spec: NetworkSpec, embed: VNodeSpec, head: VNodeSpec, p: VocabParams) -> str:
    others = [v.id for v in spec.vnodes if v.tie == embed.id and v.id != head.id]
    if others:
        return f"{', '.join(others)} also tie {embed.id}'s weight"
    ids = {v.id for v in spec.vnodes}
    taken = [shard_id(vid, s) for vid in (embed.id, head.id) for s in range(p.shards) if shard_id(vid, s) in ids]
    if taken:
        return f"the shards' ids {', '.join(taken)} are taken"
    return ""


def _split(embed: VNodeSpec, head: VNodeSpec, p: VocabParams) -> tuple[list[VNodeSpec], list[VNodeSpec]]:
    """(the embedding's shards and gather, the head's shards and loss)."""
    shared = p.model_dump()
    # between a shard and its gather or loss the values travel exactly (fp32): the embedding's wire
    # stays on the gather's output, the one its consumers read, as it was on the embedding's
    embeds = [VNodeSpec(id=shard_id(embed.id, s), op=EMBEDDING_SHARD.name, inputs=["data.tokens"],
                        precision=embed.precision, wire="fp32", recompute=embed.recompute,
                        params=ShardParams(**shared, shard=s).model_dump()) for s in range(p.shards)]
    gather = VNodeSpec(id=embed.id, op=EMBEDDING_GATHER.name, inputs=[v.id for v in embeds] + ["data.tokens"],
                       precision=embed.precision, wire=embed.wire, params=shared)
    heads = [VNodeSpec(id=shard_id(head.id, s), op=LM_HEAD_SHARD.name, inputs=[head.inputs[0], "data.targets"],
                       tie=shard_id(embed.id, s), precision=head.precision, wire="fp32", recompute=head.recompute,
                       params=ShardParams(**shared, shard=s).model_dump()) for s in range(p.shards)]
    loss = VNodeSpec(id=head.id, op=SHARDED_CE.name, inputs=[v.id for v in heads] + ["data.targets"],
                     precision="fp32", params=shared)  # the statistics are fp32 whatever the head's precision
    return [*embeds, gather], [*heads, loss]
