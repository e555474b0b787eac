"""State of an embedding <-> state of its vocabulary shards (computeall.network.vocab_split).

Pure functions over dicts of named tensors keyed `[<namespace>/]<vnode>.weight[.<suffix>]`, as in
`head_state_mapping`. Unsplit, `<embed>.weight` is (vocab, dim); split, `<embed>.shard<s>.weight`
holds its rows lo..hi. Every tensor shaped like the weight (the weight, its master, both Adam
moments) is cut or joined by rows; anything else (Adam's step count) must agree across the shards
and is carried as it is. Only rows move: round trips are exact. The tied LM head has no state.
"""

from __future__ import annotations

import torch

from computeall.network import NetworkSpec
from computeall.network.ops.vocab_shards import SHARDED_CE
from computeall.network.vocab_split import VocabGroup, vocab_groups

WEIGHT = "weight"


class VocabMappingError(ValueError):
    pass


def _owned(state: dict[str, torch.Tensor], vid: str) -> dict[tuple[str, str], torch.Tensor]:
    """{(namespace, suffix): tensor} for the keys of `<vid>.weight`."""
    prefix = f"{vid}.{WEIGHT}"
    out = {}
    for key, t in state.items():
        ns, sep, rest = key.rpartition("/")
        if rest == prefix or rest.startswith(prefix + "."):
            out[(ns + sep, rest[len(prefix):])] = t
    return out


def _without(state: dict[str, torch.Tensor], vids: list[str], slots) -> dict[str, torch.Tensor]:
    drop = {f"{ns}{vid}.{WEIGHT}{suffix}" for vid in vids for ns, suffix in slots}
    return {k: v for k, v in state.items() if k not in drop}


def split_group(state: dict[str, torch.Tensor], group: VocabGroup) -> dict[str, torch.Tensor]:
    """The embedding's state -> its shards' state; other keys pass through."""
    owned = _owned(state, group.embed)
    out = _without(state, [group.embed], owned)
    vocab = group.bounds[-1][1]
    for (ns, suffix), t in sorted(owned.items()):
        for vid, (lo, hi) in zip(group.shard_ids, group.bounds):
            out[f"{ns}{vid}.{WEIGHT}{suffix}"] = t[lo:hi].clone() if t.ndim and t.shape[0] == vocab else t.clone()
    return out


def join_group(state: dict[str, torch.Tensor], group: VocabGroup) -> dict[str, torch.Tensor]:
    """The shards' state -> the embedding's; other keys pass through."""
    per_shard = [_owned(state, vid) for vid in group.shard_ids]
    slots = set(per_shard[0])
    for vid, owned in zip(group.shard_ids, per_shard):
        if set(owned) != slots or not owned:
            raise VocabMappingError(f"shard {vid} of {group.embed} carries {sorted(owned)}, shard {group.shard_ids[0]} "
                                    f"{sorted(slots)}: the state mixes checkpoints")
    out = _without(state, list(group.shard_ids), slots)
    for ns, suffix in sorted(slots):
        parts = [owned[(ns, suffix)] for owned in per_shard]
        key = f"{ns}{group.embed}.{WEIGHT}{suffix}"
        if key in out:
            raise VocabMappingError(f"state already has {key}: it mixes the split and the unsplit form")
        if all(p.ndim and p.shape[0] == hi - lo for p, (lo, hi) in zip(parts, group.bounds)):
            out[key] = torch.cat(parts)
        elif all(p.shape == parts[0].shape and torch.equal(p, parts[0]) for p in parts):
            out[key] = parts[0].clone()
        else:
            raise VocabMappingError(f"{key}: the shards' values differ; cannot join them")
    return out


def convert_vocab_state(state: dict[str, torch.Tensor], spec: NetworkSpec) -> dict[str, torch.Tensor]:
    """State saved by either form -> the form of `spec`; groups already in it are left alone."""
    ids = {v.id: v.op for v in spec.vnodes}
    for group in vocab_groups(spec):
        split = group.shard_ids[0] in ids
        if split and _owned(state, group.embed):
            state = split_group(state, group)
        elif not split and _owned(state, group.shard_ids[0]):
            state = join_group(state, group)
    return state


def vocab_sources(spec: NetworkSpec, vid: str) -> list[str] | None:
    """The VNodes whose checkpoint objects may hold `vid`'s state in either form, when `vid` is part of a
    vocabulary split (the embedding, its gather or a shard; a head shard, which holds nothing, from its
    loss's); None when it is not."""
    for group in vocab_groups(spec):
        if vid == group.embed:
            return [vid, *group.shard_ids]
        if vid in group.shard_ids:
            return [vid, group.embed]
    for v in spec.vnodes:
        if v.op == SHARDED_CE.name and vid in v.inputs:
            return [vid, v.id]
    return None
