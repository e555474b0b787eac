"""Shared by tensorcore tests: a tiny GPT with per-VNode precision overrides; the bytes autograd keeps."""

from __future__ import annotations

import io

import torch

from computeall.network import Graph, VNodeSpec, load_network
from computeall.network.ops import OPS
from computeall.tensorcore.ops import build_vnode

TINY = """
name: t
vocab_size: 64
context: 16
defaults: {{dim: 32, heads: 2, hidden: 48, precision: {default}}}
vnodes:
  - {{id: embed, op: embedding, inputs: [data.tokens]{embed}}}
  - repeat:
      count: 2
      input: embed
      output: "b{{i}}.res2"
      vnodes:
        - {{id: "b{{i}}.norm1", op: rmsnorm, inputs: ["{{in}}"]}}
        - {{id: "b{{i}}.attn", op: attention, inputs: ["b{{i}}.norm1"]{attn}}}
        - {{id: "b{{i}}.res1", op: add, inputs: ["{{in}}", "b{{i}}.attn"]}}
        - {{id: "b{{i}}.norm2", op: rmsnorm, inputs: ["b{{i}}.res1"]}}
        - {{id: "b{{i}}.mlp", op: swiglu_mlp, inputs: ["b{{i}}.norm2"]}}
        - {{id: "b{{i}}.res2", op: add, inputs: ["b{{i}}.res1", "b{{i}}.mlp"]}}
  - {{id: norm_f, op: rmsnorm, inputs: [b1.res2]{head}}}
  - {{id: head, op: tied_lm_head_ce, inputs: [norm_f, data.targets], tie: embed{head}}}
"""


def tiny_graph(default: str = "fp32", embed: str | None = None, attn: str | None = None, head: str | None = None) -> Graph:
    def override(p):
        return f", precision: {p}" if p else ""

    text = TINY.format(default=default, embed=override(embed), attn=override(attn), head=override(head))
    return Graph(load_network(text))


def batch(graph: Graph, n: int = 4, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, graph.spec.vocab_size, (n, graph.spec.context + 1), generator=g)



def saved_object(runtime, optimizer, vid: str) -> bytes:
    """VNode `vid`'s checkpoint object, as a PNode streams it into the Object Store."""
    from computeall.tensorcore.checkpoint import write_vnode

    out = io.BytesIO()
    write_vnode(out, runtime, optimizer, vid)
    return out.getvalue()


def example_vnode(name: str) -> torch.nn.Module:
    """A VNode of op `name` built from its registry entry's `example` (fp32, on the CPU); a tied op is
    handed a VNode of the op it ties to, built from that op's example with the parameters they share."""
    op = OPS[name]
    params = op.params.model_validate(op.example).model_dump()
    tied, tie = {}, None
    if op.tie is not None:
        target = OPS[op.tie.op]
        tied_params = {**target.params.model_validate(target.example).model_dump(), **{f: params[f] for f in op.tie.same}}
        tie = "w"
        tied[tie] = build_vnode(VNodeSpec(id=tie, op=op.tie.op, inputs=[], precision="fp32", params=tied_params), 0, torch.device("cpu"))
    spec = VNodeSpec(id="v", op=name, inputs=[], tie=tie, precision="fp32", params=params)
    return build_vnode(spec, 0, torch.device("cpu"), tied)


def saved_bytes(fn, x: torch.Tensor) -> int:
    """Bytes of the distinct storages autograd keeps for fn(x)'s backward, but the parameters'."""
    storages: dict[int, int] = {}

    def pack(t: torch.Tensor):
        if not isinstance(t, torch.nn.Parameter):
            storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn(x)
    return sum(storages.values())
