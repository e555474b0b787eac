"""`computeall network show FILE [--fused] [--json]`: a network's VNode graph, before and after a session's rewrites
(attention-head fusion, vocabulary shards)."""

from __future__ import annotations

import argparse
import json

from computeall.network import Graph, NetworkError, NetworkSpec, load_network_file
from computeall.network.head_fusion import fuse_heads
from computeall.network.vocab_split import split_vocab

from ..errors import UserError

# parameters that every VNode of a network repeats; shown once in the header instead
_QUIET = {"vocab_size"}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("network", help="inspect network YAML files")
    nsub = p.add_subparsers(dest="network_command", required=True)
    show = nsub.add_parser("show", help="print a network's VNodes, edges and parameter counts")
    show.add_argument("file", help="network YAML, e.g. examples/networks/tiny-gpt-heads.yaml")
    show.add_argument("--fused", action="store_true",
                      help="also apply the rewrites a session applies (attention-head fusion, vocabulary shards) "
                           "and print the graph after them")
    show.add_argument("--json", action="store_true", help="machine-readable output")
    show.set_defaults(func=run_show)


def run_show(args: argparse.Namespace) -> int:
    try:
        spec = load_network_file(args.file)
    except NetworkError as exc:
        raise UserError(str(exc)) from None
    fused, lines = rewritten(spec) if args.fused else (None, [])
    if args.json:
        out: dict = {"network": describe(spec)}
        if fused is not None:
            out["rewrite"] = lines
            out["fused"] = describe(fused)
        print(json.dumps(out, indent=2))
        return 0
    if fused is None:
        print("\n".join(render(spec)))
        return 0
    print("as written:")
    print("\n".join("  " + line for line in render(spec)))
    print("\nrewrite:")
    print("\n".join("  " + line for line in lines) if lines else "  (no per-head attention patterns, no vocabulary beyond a shard)")
    print("\nas a session runs it:")
    print("\n".join("  " + line for line in render(fused)))
    return 0


def rewritten(spec: NetworkSpec) -> tuple[NetworkSpec, list[str]]:
    """The network as a session runs it (heads fused, vocabulary in shards) and the rewrites' lines."""
    fused, lines = fuse_heads(spec)
    split, more = split_vocab(fused)
    return split, lines + more


def describe(spec: NetworkSpec) -> dict:
    graph = Graph(spec)
    return {
        "name": spec.name,
        "vocab_size": spec.vocab_size,
        "context": spec.context,
        "params": sum(graph.param_count(v) for v in graph.order),
        "vnodes": [
            {
                "id": vid,
                "op": graph.vnodes[vid].op,
                "inputs": graph.vnodes[vid].inputs,
                "precision": graph.vnodes[vid].precision,
                "wire": graph.wire(vid),
                "params": graph.vnodes[vid].params,
                "param_count": graph.param_count(vid),
                "out_features": graph.out_features[vid],
                **({"tie": graph.vnodes[vid].tie} if graph.vnodes[vid].tie else {}),
                **({"recompute": True} if graph.vnodes[vid].recompute else {}),
            }
            for vid in graph.order
        ],
    }


def render(spec: NetworkSpec) -> list[str]:
    d = describe(spec)
    rows = [("vnode", "op", "inputs", "params", "out", "settings")]
    for v in d["vnodes"]:
        settings = {k: val for k, val in v["params"].items() if k not in _QUIET}
        for key in ("tie", "recompute"):
            if v.get(key):
                settings[key] = v[key]
        if v["wire"] != "fp32":
            settings["wire"] = v["wire"]
        if "head_ids" in settings:
            ids = settings["head_ids"]
            settings["head_ids"] = f"{ids[0]}..{ids[-1]}" if len(ids) > 2 else ",".join(ids)
        rows.append((
            v["id"], v["op"], _inputs(v["inputs"]), f"{v['param_count']:,}",
            str(v["out_features"] or "-"), " ".join(f"{k}={val}" for k, val in settings.items()),
        ))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    lines = [
        f"{d['name']}: {len(d['vnodes'])} VNodes, {d['params']:,} parameters, "
        f"vocab {d['vocab_size']}, context {d['context']}"
    ]
    for r in rows:
        lines.append(("  ".join(c.ljust(w) for c, w in zip(r[:5], widths)) + "  " + r[5]).rstrip())
    return lines


def _inputs(names: list[str]) -> str:
    if len(names) > 3:
        return f"{names[0]}..{names[-1]} ({len(names)})"
    return ",".join(names)
