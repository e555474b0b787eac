"""YAML text -> validated `NetworkSpec`, or a `NetworkError` naming the VNode and field at fault."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from computeall.protocol.limits import NETWORK_VNODES

from .ops import DATA_INPUTS, OPS, OpSpec, n_inputs
from .schema import NetworkFile, NetworkSpec, RepeatEntry, VNodeEntry, VNodeSpec
from .yaml_shape import SAFE_LOADER, shape_problem

_PLACEHOLDER = re.compile(r"\{(i|in)\}")


class NetworkError(ValueError):
    """Everything wrong with a network file, one line per problem."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("invalid network:\n  " + "\n  ".join(problems))


def load_network_file(path: str | Path) -> NetworkSpec:
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise NetworkError([f"cannot read {path}: {exc.strerror}"]) from None
    return load_network(text, source=str(path))


def load_network(text: str, source: str = "<network>") -> NetworkSpec:
    """Within the limits of `computeall.protocol.limits` (checked first, cheaply), or a `NetworkError`."""
    too_big = shape_problem(text, source)
    if too_big:
        raise NetworkError([too_big])
    try:
        raw = yaml.load(text, Loader=SAFE_LOADER)
    except yaml.YAMLError as exc:
        raise NetworkError([_yaml_problem(source, exc)]) from None
    if not isinstance(raw, dict):
        raise NetworkError([f"{source} must be a YAML mapping with name, vocab_size, context and vnodes"])
    try:
        file = NetworkFile.model_validate(raw)
    except ValidationError as exc:
        raise NetworkError([_describe(err) for err in exc.errors()]) from None
    count = vnode_count(file)
    if count > NETWORK_VNODES:
        raise NetworkError([f"{source} has {count:,} VNodes once `repeat` is expanded; the limit is {NETWORK_VNODES:,}"])
    spec = NetworkSpec(
        name=file.name,
        vocab_size=file.vocab_size,
        context=file.context,
        wire=file.defaults.wire,
        vnodes=_resolve(file, expand(file)),
    )
    problems = validate(spec)
    if problems:
        raise NetworkError(problems)
    return spec


def _yaml_problem(source: str, exc: yaml.YAMLError) -> str:
    """Where the YAML broke, named by the file (PyYAML names the text it parsed `<unicode string>`)."""
    mark = getattr(exc, "problem_mark", None)
    if mark is None:
        return f"{source} is not valid YAML: {exc}"
    context = getattr(exc, "context", None)
    what = "; ".join(str(part) for part in (context, getattr(exc, "problem", None)) if part)
    return f"{source}, line {mark.line + 1}, column {mark.column + 1}: not valid YAML ({what})"


def vnode_count(file: NetworkFile) -> int:
    """How many VNodes `expand` would make, without making them."""
    return sum(len(e.repeat.vnodes) * e.repeat.count if isinstance(e, RepeatEntry) else 1 for e in file.vnodes)


def expand(file: NetworkFile) -> list[VNodeEntry]:
    """Unroll `repeat` macros into plain VNode entries."""
    out: list[VNodeEntry] = []
    for entry in file.vnodes:
        if isinstance(entry, VNodeEntry):
            out.append(entry)
            continue
        rep = entry.repeat
        current_input = rep.input
        for i in range(rep.first, rep.first + rep.count):
            subst = {"i": str(i), "in": current_input}
            for v in rep.vnodes:
                data = v.model_dump()
                data["id"] = _fill(data["id"], subst)
                data["inputs"] = [_fill(s, subst) for s in data["inputs"]]
                if data.get("tie"):
                    data["tie"] = _fill(data["tie"], subst)
                out.append(VNodeEntry.model_validate(data))
            current_input = _fill(rep.output, subst)
    return out


def _fill(text: str, subst: dict[str, str]) -> str:
    return _PLACEHOLDER.sub(lambda m: subst[m.group(1)], text)


def _resolve(file: NetworkFile, entries: list[VNodeEntry]) -> list[VNodeSpec]:
    """Merge defaults into each VNode's parameters; unknown ops are caught by `validate`."""
    defaults = file.defaults
    shared = {"vocab_size": file.vocab_size, **defaults.op_params}
    resolved = []
    for e in entries:
        op = OPS.get(e.op)
        params: dict[str, Any] = {}
        if op is not None:
            fields = op.params.model_fields
            params = {k: v for k, v in shared.items() if k in fields}
        params.update(e.op_params)
        resolved.append(
            VNodeSpec(
                id=e.id,
                op=e.op,
                inputs=e.inputs,
                tie=e.tie,
                precision=e.precision or defaults.precision,
                wire=e.wire,
                params=params,
                recompute=defaults.recompute if e.recompute is None else e.recompute,
            )
        )
    return resolved


def validate(spec: NetworkSpec) -> list[str]:
    """Every problem of a resolved network, each naming the VNode and field."""
    problems: list[str] = []
    by_id: dict[str, VNodeSpec] = {}
    for v in spec.vnodes:
        if v.id in by_id:
            problems.append(f"vnode {v.id!r}, field 'id': defined twice")
        if v.id.startswith("data."):
            problems.append(f"vnode {v.id!r}, field 'id': the 'data.' prefix is reserved for dataset inputs")
        by_id[v.id] = v

    for v in spec.vnodes:
        op = OPS.get(v.op)
        where = f"vnode {v.id!r}"
        if op is None:
            problems.append(f"{where}, field 'op': unknown op {v.op!r}; known ops: {', '.join(sorted(OPS))}")
            continue
        try:
            params = op.params.model_validate(v.params)
        except ValidationError as exc:
            for err in exc.errors():
                field = ".".join(str(x) for x in err["loc"]) or "params"
                problems.append(f"{where}, field {field!r}: {err['msg']}")
            continue
        if len(v.inputs) != n_inputs(op, params):
            problems.append(f"{where}, field 'inputs': op {v.op} takes {n_inputs(op, params)} input(s), got {len(v.inputs)}")
            continue
        for name in v.inputs:
            if name not in by_id and name not in DATA_INPUTS:
                problems.append(f"{where}, field 'inputs': no VNode or dataset input named {name!r}")
        problems += _check_tie(v, op, params, by_id)
        problems += [f"{where}, field {field!r}: {message}" for field, message in op.check(params, v.inputs)]

    cycle = find_cycle(spec)
    if cycle:
        shown = cycle if len(cycle) <= 12 else [*cycle[:5], f"... {len(cycle) - 10} more ...", *cycle[-5:]]
        problems.append(f"vnode {cycle[0]!r}, field 'inputs': cycle {' -> '.join(shown)}")
    if not problems:
        problems += _check_features(spec)
    if not any(OPS[v.op].is_loss for v in spec.vnodes if v.op in OPS):
        losses = ", ".join(name for name, op in OPS.items() if op.is_loss)
        problems.append(f"network, field 'vnodes': no loss VNode (e.g. op {losses})")
    return problems


def _check_tie(v: VNodeSpec, op: OpSpec, params: Any, by_id: dict[str, VNodeSpec]) -> list[str]:
    where = f"vnode {v.id!r}, field 'tie'"
    if op.tie is None:
        return [f"{where}: op {v.op} has no tied weight"] if v.tie else []
    if not v.tie:
        return [f"{where}: op {v.op} needs the id of the {op.tie.op} whose weight it shares"]
    target = by_id.get(v.tie)
    if target is None:
        return [f"{where}: no VNode named {v.tie!r} to tie to"]
    if target.op != op.tie.op:
        return [f"{where}: {v.tie!r} is a {target.op}, not an {op.tie.op}"]
    try:  # with its defaults filled in, as this VNode's are
        theirs = OPS[target.op].params.model_validate(target.params)
    except ValidationError:
        return []  # its own problems are reported where it is checked
    problems = []
    for key in op.tie.same:
        if getattr(theirs, key) != getattr(params, key):
            problems.append(f"{where}: {key} {getattr(params, key)} differs from {v.tie!r}'s {getattr(theirs, key)}")
    return problems


def _check_features(spec: NetworkSpec) -> list[str]:
    """Walk in topological order and check each input's feature size against what the op expects."""
    from .graph import Graph

    problems = []
    graph = Graph(spec)
    feats: dict[str, int | None] = {name: None for name in DATA_INPUTS}
    for vid in graph.order:
        v, op, params = graph.vnodes[vid], graph.op(vid), graph.params(vid)
        vnode_inputs = [i for i in v.inputs if i not in DATA_INPUTS]
        got = [feats[i] for i in vnode_inputs]
        if op.out_features is None:  # elementwise: inputs agree, output matches
            if len(set(got)) > 1:
                problems.append(f"vnode {v.id!r}, field 'inputs': feature sizes differ {dict(zip(vnode_inputs, got))}")
            feats[v.id] = got[0] if got else None
            continue
        for name, size, want in zip(vnode_inputs, got, op.expected_in_features(params, len(got))):
            if size is not None and size != want:
                problems.append(f"vnode {v.id!r}, field {op.in_field!r}: expects {want} features but {name!r} gives {size}")
        feats[v.id] = op.out_features(params)
    return problems


def find_cycle(spec: NetworkSpec) -> list[str]:
    """A cycle as a list of ids (first == last), or [] when the graph is acyclic.

    Depth-first with an explicit stack: a chain of thousands of VNodes must not hit Python's recursion limit.
    """
    ids = {v.id: v for v in spec.vnodes}
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    for root in ids:
        if root in state:
            continue
        path = [root]
        pending = [iter(ids[root].inputs)]
        state[root] = 1
        while pending:
            dep = next((d for d in pending[-1] if d in ids and state.get(d) != 2), None)
            if dep is None:
                state[path.pop()] = 2
                pending.pop()
            elif state.get(dep) == 1:
                return path[path.index(dep):] + [dep]
            else:
                state[dep] = 1
                path.append(dep)
                pending.append(iter(ids[dep].inputs))
    return []


def _describe(err: dict) -> str:
    loc = err["loc"]
    # pydantic locations look like ('vnodes', 3, 'VNodeEntry', 'op'): name the entry and the field
    if loc and loc[0] == "vnodes" and len(loc) > 1:
        rest = [str(x) for x in loc[2:] if x not in ("VNodeEntry", "RepeatEntry")]
        return f"vnodes[{loc[1]}], field {'.'.join(rest) or 'entry'!r}: {err['msg']}"
    return f"network, field {'.'.join(str(x) for x in loc)!r}: {err['msg']}"
