"""Attention-head fusion: per-head VNodes rewritten into one fused multi-head VNode.

A network may write every attention head as its own VNode, so heads can be spread over
many small machines:

    b0.h0 .. b0.h{H-1}   attention_head (head i, same input, same head_dim)
    b0.attn              concat_heads (heads: H) reading exactly those heads in head order

When every head of such a group can run on one PNode, dispatching H small VNodes one
by one wastes the hardware. `fuse_heads` rewrites each group into one
`fused_attention_heads` VNode that runs all heads in one batched kernel call. The fused
VNode takes the concat's id, so everything downstream still reads the same name and a
checkpoint can name it; it records the head ids so it can initialise its q/k/v slices
from the heads' own seeds (fused and unfused runs from one seed are the same model) and
so that `computeall.tensorcore.head_state_mapping` can map state between the forms.

The match is exact; anything else stays as written, with a line saying why.
"""

from __future__ import annotations

from dataclasses import dataclass

from .ops import AttentionHeadParams, ConcatHeadsParams, FusedAttentionHeadsParams
from .schema import NetworkSpec, VNodeSpec

FUSED_OP = "fused_attention_heads"
HEAD_OP = "attention_head"  # the per-head op it fuses


@dataclass(frozen=True)
class HeadGroup:
    """One block's heads: `head_ids[i]` is head i; in the fused form they are the VNode `fused_id`."""

    fused_id: str  # the concat_heads VNode's id, which the fused VNode keeps
    source: str  # the input every head reads
    head_ids: tuple[str, ...]
    dim: int
    head_dim: int
    rope_base: float
    precision: str
    wire: str | None  # the concat's own wire setting: the fused VNode's output is the concat's
    recompute: bool = False  # the fused VNode recomputes when the concat or any head asked to

    @property
    def heads(self) -> int:
        return len(self.head_ids)


def find_head_groups(spec: NetworkSpec) -> tuple[list[HeadGroup], list[str]]:
    """The fusable groups of an unfused network, and one line for each pattern that is not fusable."""
    by_id = {v.id: v for v in spec.vnodes}
    consumers: dict[str, list[str]] = {}
    for v in spec.vnodes:
        for name in v.inputs:
            consumers.setdefault(name, []).append(v.id)

    groups: list[HeadGroup] = []
    reasons: list[str] = []
    claimed: set[str] = set()
    for concat in spec.vnodes:
        if concat.op != "concat_heads":
            continue
        group, why = _match(concat, by_id, consumers, spec.wire)
        if group is None:
            reasons.append(f"left {concat.id} unfused: {why}")
            claimed.update(concat.inputs)
            continue
        groups.append(group)
        claimed.update(group.head_ids)
    for v in spec.vnodes:
        if v.op == HEAD_OP and v.id not in claimed:
            reasons.append(f"left {v.id} unfused: no concat_heads VNode gathers it")
    return groups, reasons


def _match(
    concat: VNodeSpec, by_id: dict[str, VNodeSpec], consumers: dict[str, list[str]], default_wire: str
) -> tuple[HeadGroup | None, str]:
    cparams = ConcatHeadsParams.model_validate(concat.params)
    heads = [by_id.get(name) for name in concat.inputs]
    for name, h in zip(concat.inputs, heads):
        if h is None or h.op != HEAD_OP:
            what = "a dataset input" if h is None else f"a {h.op}"
            return None, f"its input {name} is {what}, not an attention_head"
    hparams = [AttentionHeadParams.model_validate(h.params) for h in heads]
    if len(heads) != cparams.heads:
        return None, f"it gathers {len(heads)} inputs but declares {cparams.heads} heads"
    indices = [p.head for p in hparams]
    if indices != list(range(len(heads))):
        missing = sorted(set(range(max(indices) + 1)) - set(indices))
        detail = f" (head {', '.join(map(str, missing))} missing)" if missing else ""
        return None, f"head indices {indices} are not 0..{len(heads) - 1} in order{detail}"
    head_dims = {h.id: p.head_dim for h, p in zip(heads, hparams)}
    if len(set(head_dims.values())) > 1 or len(set(cparams.widths())) > 1:
        return None, f"the heads have different head dims {head_dims}"
    if cparams.widths()[0] != hparams[0].head_dim:
        return None, f"its head_dim {cparams.head_dim} differs from the heads' {hparams[0].head_dim}"
    sources = {h.id: tuple(h.inputs) for h in heads}
    if len(set(sources.values())) > 1:
        return None, f"the heads read different inputs {({k: list(v) for k, v in sources.items()})}"
    dims = {p.dim for p in hparams} | {cparams.dim}
    if len(dims) > 1:
        return None, f"the heads and the concat disagree on dim {sorted(dims)}"
    if len({p.rope_base for p in hparams}) > 1:
        return None, "the heads use different rope_base values"
    precisions = {h.id: h.precision for h in heads} | {concat.id: concat.precision}
    if len(set(precisions.values())) > 1:
        return None, f"the heads and the concat differ in precision {precisions}"
    compressed = {h.id: h.wire or default_wire for h in heads if (h.wire or default_wire) != "fp32"}
    if compressed:
        # the head -> concat edges compress; fused, those edges would vanish and the math would change
        return None, f"the heads compress their outputs on the wire {compressed}"
    for h in heads:
        others = [c for c in consumers.get(h.id, []) if c != concat.id]
        if others:
            return None, f"head {h.id} also feeds {', '.join(others)}; fused, it would have no output of its own"
        if consumers.get(h.id, []).count(concat.id) != 1:
            return None, f"head {h.id} is read more than once by {concat.id}"
        if h.tie:
            return None, f"head {h.id} ties a weight"
    return (
        HeadGroup(
            fused_id=concat.id,
            source=heads[0].inputs[0],
            head_ids=tuple(h.id for h in heads),
            dim=cparams.dim,
            head_dim=hparams[0].head_dim,
            rope_base=hparams[0].rope_base,
            precision=concat.precision,
            wire=concat.wire,
            recompute=concat.recompute or any(h.recompute for h in heads),
        ),
        "",
    )


def fused_vnode(group: HeadGroup) -> VNodeSpec:
    params = FusedAttentionHeadsParams(
        dim=group.dim, heads=group.heads, head_dim=group.head_dim,
        rope_base=group.rope_base, head_ids=list(group.head_ids),
    )
    return VNodeSpec(
        id=group.fused_id, op=FUSED_OP, inputs=[group.source], tie=None,
        precision=group.precision, wire=group.wire, params=params.model_dump(), recompute=group.recompute,
    )


def fuse_heads(spec: NetworkSpec) -> tuple[NetworkSpec, list[str]]:
    """Rewrite every exact per-head pattern into one fused VNode; a pure function.

    Returns the new network (the input is not modified) and one log line per fused group
    and per pattern left alone, saying why.
    """
    groups, reasons = find_head_groups(spec)
    by_fused = {g.fused_id: g for g in groups}
    dropped = {h for g in groups for h in g.head_ids}
    vnodes = []
    for v in spec.vnodes:
        if v.id in dropped:
            continue
        vnodes.append(fused_vnode(by_fused[v.id]) if v.id in by_fused else v.model_copy(deep=True))
    lines = [
        f"fused {g.head_ids[0]}..{g.head_ids[-1]} ({g.heads} heads of {g.head_dim}) into {g.fused_id}: "
        f"one {FUSED_OP} VNode reading {g.source}"
        for g in groups
    ]
    out = NetworkSpec(name=spec.name, vocab_size=spec.vocab_size, context=spec.context, wire=spec.wire, vnodes=vnodes)
    return out, lines + reasons


def head_groups(spec: NetworkSpec) -> list[HeadGroup]:
    """The head groups of a network in either form: fused VNodes that name their heads, or fusable patterns."""
    out = []
    for v in spec.vnodes:
        if v.op == FUSED_OP:
            p = FusedAttentionHeadsParams.model_validate(v.params)
            if p.head_ids:
                out.append(HeadGroup(v.id, v.inputs[0], tuple(p.head_ids), p.dim, p.head_dim, p.rope_base, v.precision,
                                     v.wire, v.recompute))
    return out + find_head_groups(spec)[0]
