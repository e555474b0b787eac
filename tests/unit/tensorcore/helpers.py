"""A tiny GPT for tensorcore tests, with per-VNode precision overrides."""

from __future__ import annotations

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


def run_step(runtime, tokens: torch.Tensor, loss_scale: float = 1.0, micro: int = 0) -> tuple[float, dict]:
    """One micro-batch through VNodeRuntimes, as PNode stages run it: forward VNode by VNode,
    backward in reverse order with consumer gradients summed in graph order. `runtime` hosts the
    whole graph, or is a list of runtimes (PNodes) that split it. Returns (loss sum, {vnode: output})."""
    from computeall.network.ops import OPS

    runtimes = runtime if isinstance(runtime, list) else [runtime]
    host = {v: r for r in runtimes for v in r.order}
    graph = runtimes[0].graph
    step_tokens = tokens.shape[0] * graph.spec.context
    values = {"data.tokens": tokens[:, :-1], "data.targets": tokens[:, 1:]}
    loss = 0.0
    for vid in graph.order:
        out = host[vid].forward(vid, micro, [values[i] for i in graph.vnodes[vid].inputs])
        if OPS[graph.vnodes[vid].op].is_loss:
            loss += float(out)
        else:
            values[vid] = out
    grads: dict[str, dict[str, torch.Tensor]] = {v: {} for v in graph.order}
    for vid in reversed(graph.order):
        spec = graph.vnodes[vid]
        if OPS[spec.op].is_loss:
            grad_out = torch.tensor(loss_scale / step_tokens)
        else:
            parts = [grads[vid][c] for c in graph.consumers(vid)]
            grad_out = parts[0]
            for g in parts[1:]:
                grad_out = grad_out + g
        for name, g in zip(spec.inputs, host[vid].backward(vid, micro, grad_out)):
            if g is not None:
                grads[name][vid] = g if vid not in grads[name] else grads[name][vid] + g
    return loss, {k: v for k, v in values.items() if not k.startswith("data.")}
