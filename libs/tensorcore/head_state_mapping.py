"""State of per-head attention VNodes <-> state of their fused VNode: weights, fp32 masters, Adam state
(and, through `vocab_state_mapping`, of an embedding <-> its vocabulary shards: `convert_state` and
`source_vnodes` cover both rewrites).

Pure functions over dicts of named tensors. A key is `[<namespace>/]<vnode>.<param>[.<suffix>]`:
`b0.h3.qkv.weight`, `param/b0.h3.qkv.weight`, `optim/b0.h3.qkv.weight.exp_avg`,
`b0.h3.qkv.weight.master`, `....step`. For a head group (see `computeall.network.head_fusion`):

- unfused: head i holds `<head_i>.qkv.weight` (3*hd, dim) with rows [q_i; k_i; v_i]; the concat
  VNode holds `<concat>.proj.weight` (dim, H*hd).
- fused: the VNode (same id as the concat) holds `<concat>.qkv.weight` (3*H*hd, dim) with rows
  [q_0..q_{H-1}; k_0..k_{H-1}; v_0..v_{H-1}] and the same `<concat>.proj.weight`.

Every tensor shaped like the weight (the weight, its master, both Adam moments) is rearranged
the same way; anything else under those names (Adam's step count, a 0-dim tensor) must agree
across the heads and is carried as it is. The mapping only moves rows: round trips are exact.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping

import torch

from computeall.network import NetworkSpec
from computeall.network.head_fusion import HeadGroup, head_groups

from .ops.fused_heads import qkv_from_heads, qkv_to_heads
from .vocab_state_mapping import VocabMappingError, convert_vocab_state, vocab_sources

QKV = "qkv.weight"


class StateMappingError(ValueError):
    pass


def _split(key: str) -> tuple[str, str]:
    """'optim/b0.h1.qkv.weight.exp_avg' -> ('optim/', 'b0.h1.qkv.weight.exp_avg')."""
    ns, sep, rest = key.rpartition("/")
    return (ns + sep, rest)


def _owned(state: dict[str, torch.Tensor], vid: str) -> dict[tuple[str, str], torch.Tensor]:
    """{(namespace, suffix): tensor} for the keys of `<vid>.qkv.weight`."""
    prefix = f"{vid}.{QKV}"
    out = {}
    for key, t in state.items():
        ns, rest = _split(key)
        if rest == prefix or rest.startswith(prefix + "."):
            out[(ns, rest[len(prefix):])] = t
    return out


def fuse_group(state: dict[str, torch.Tensor], group: HeadGroup) -> dict[str, torch.Tensor]:
    """The per-head state of one group -> the fused VNode's state; other keys pass through."""
    per_head = [_owned(state, h) for h in group.head_ids]
    slots = set(per_head[0])
    for h, owned in zip(group.head_ids, per_head):
        if not owned:
            raise StateMappingError(f"state has nothing for head {h}.{QKV} (group {group.fused_id})")
        if set(owned) != slots:
            raise StateMappingError(f"heads of {group.fused_id} carry different entries: {sorted(slots ^ set(owned))}")
    drop = {f"{ns}{h}.{QKV}{suffix}" for h in group.head_ids for ns, suffix in slots}
    out = {k: v for k, v in state.items() if k not in drop}
    for ns, suffix in sorted(slots):
        parts = [owned[(ns, suffix)] for owned in per_head]
        key = f"{ns}{group.fused_id}.{QKV}{suffix}"
        if key in out:
            raise StateMappingError(f"state already has {key}: it mixes the fused and the unfused form")
        shape = (3 * group.head_dim, group.dim)
        if all(tuple(p.shape) == shape for p in parts):
            out[key] = qkv_from_heads(parts)
        else:
            _check_same(parts, f"{group.fused_id}.{QKV}{suffix}")
            out[key] = parts[0].clone()
    return out


def unfuse_group(state: dict[str, torch.Tensor], group: HeadGroup) -> dict[str, torch.Tensor]:
    """The fused VNode's state -> the per-head state of its group; other keys pass through."""
    owned = _owned(state, group.fused_id)
    if not owned:
        raise StateMappingError(f"state has nothing for {group.fused_id}.{QKV}")
    drop = {f"{ns}{group.fused_id}.{QKV}{suffix}" for ns, suffix in owned}
    out = {k: v for k, v in state.items() if k not in drop}
    shape = (3 * group.heads * group.head_dim, group.dim)
    for (ns, suffix), t in sorted(owned.items()):
        pieces = qkv_to_heads(t, group.heads) if tuple(t.shape) == shape else [t.clone()] * group.heads
        for h, piece in zip(group.head_ids, pieces):
            out[f"{ns}{h}.{QKV}{suffix}"] = piece.clone()
    return out


def _check_same(parts: list[torch.Tensor], name: str) -> None:
    for p in parts[1:]:
        if p.shape != parts[0].shape or not torch.equal(p, parts[0]):
            raise StateMappingError(f"{name}: the heads' values differ ({parts[0].tolist()} vs {p.tolist()}); cannot fuse")


def to_fused(state: dict[str, torch.Tensor], groups: list[HeadGroup]) -> dict[str, torch.Tensor]:
    for g in groups:
        state = fuse_group(state, g)
    return state


def to_unfused(state: dict[str, torch.Tensor], groups: list[HeadGroup]) -> dict[str, torch.Tensor]:
    for g in groups:
        state = unfuse_group(state, g)
    return state


def convert_state(state: dict[str, torch.Tensor], spec: NetworkSpec) -> dict[str, torch.Tensor]:
    """State saved by either topology -> the form `spec` needs; groups already in that form are left alone.

    `spec` is the network the state will be loaded into (fused or not, split by vocabulary or not); the
    head groups are read from it (a fused VNode names its heads), so the caller needs nothing else.
    """
    fused_ids = {v.id for v in spec.vnodes if v.op == "fused_attention_heads"}
    for g in head_groups(spec):
        if g.fused_id in fused_ids:
            if any(_owned(state, h) for h in g.head_ids):
                state = fuse_group(state, g)
        elif _owned(state, g.fused_id):
            state = unfuse_group(state, g)
    try:
        return convert_vocab_state(state, spec)
    except VocabMappingError as exc:
        raise StateMappingError(str(exc)) from None


def source_vnodes(spec: NetworkSpec, vid: str) -> list[str]:
    """The VNodes whose checkpoint objects may hold `vid`'s state, from either topology.

    A fused VNode's state may sit in its heads' objects (and the concat's, which has its id); a
    head's or the concat's state may sit in the fused VNode's object (the concat's id); an embedding's
    in its vocabulary shards' objects, and theirs in the embedding's.
    """
    vocab = vocab_sources(spec, vid)
    if vocab is not None:
        return vocab
    for g in head_groups(spec):
        if vid == g.fused_id:
            return [vid, *g.head_ids]
        if vid in g.head_ids:
            return [vid, g.fused_id]
    return [vid]


def _owner(key: str, ids_longest_first: list[str]) -> str | None:
    rest = _split(key)[1]
    return next((vid for vid in ids_longest_first if rest.startswith(vid + ".")), None)


def group_by_vnode(state: dict[str, torch.Tensor], spec: NetworkSpec) -> dict[str, dict[str, torch.Tensor]]:
    """Split a flat state into per-VNode dicts (one checkpoint object each) by the VNode ids of `spec`."""
    ids = sorted((v.id for v in spec.vnodes), key=len, reverse=True)  # longest first: 'b0.h10' before 'b0.h1'
    out: dict[str, dict[str, torch.Tensor]] = defaultdict(dict)
    for key, t in state.items():
        owner = _owner(key, ids)
        if owner is None:
            raise StateMappingError(f"{key} names no VNode of {spec.name}")
        out[owner][key] = t
    return dict(out)


def vnode_state(objects: Mapping[str, Mapping[str, torch.Tensor]], spec: NetworkSpec, vid: str) -> dict[str, torch.Tensor]:
    """VNode `vid` of `spec`, from checkpoint objects (VNode id -> its tensors) of either topology.

    `objects` should hold the objects of `source_vnodes(spec, vid)` that the checkpoint has. The result
    has the keys a checkpoint written by `spec`'s topology would have for `vid` (same namespaces).
    """
    merged: dict[str, torch.Tensor] = {}
    for tensors in objects.values():
        merged.update(tensors)
    converted = convert_state(merged, spec)
    ids = sorted((v.id for v in spec.vnodes), key=len, reverse=True)
    return {k: t for k, t in converted.items() if _owner(k, ids) == vid}
