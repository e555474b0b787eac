"""A tiny GPT for tensorcore tests, with per-VNode precision overrides."""

from __future__ import annotations

import io

import torch

from computeall.network import Graph, load_network

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
