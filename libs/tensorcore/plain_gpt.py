"""The network written with torch's own modules, the way a torch user writes it: the outside reference.

nn.Embedding, nn.Linear, nn.RMSNorm, F.scaled_dot_product_attention with RoPE, a SwiGLU MLP and an
LM head tied to the embedding. Nothing of the project's ops, kernels or optimizer is imported here
(tests/unit/tensorcore/test_plain_gpt.py holds that), so a bug shared by one of our ops and our own
reference (`reference_model.py`, built from the same VNode modules) shows against this one. Only
the shape comes from the network YAML, and a distributed run's weights can be loaded into it: the
weights are data, `vnode_names` says which VNode parameter each module parameter is.

Used by the equivalence test (a session against this model, torch's AdamW and `clip_grad_norm_`) and
by every benchmark figure "÷ plain torch" (the same model trained by a practitioner's loop).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from computeall.network import Graph, NetworkSpec, load_network_file
from computeall.network.head_fusion import fuse_heads

NORM_EPS = 1e-5
ROPE_BASE = 10000.0


@dataclass(frozen=True)
class GPTShape:
    vocab: int
    context: int
    dim: int
    heads: int
    hidden: int
    layers: int

    @classmethod
    def from_network(cls, path: Path) -> GPTShape:
        return cls.from_spec(load_network_file(path))

    @classmethod
    def from_spec(cls, spec: NetworkSpec) -> GPTShape:
        """The shape of a network of attention blocks: all heads in one VNode, or one VNode per head
        (read in its fused form)."""
        graph = Graph(fuse_heads(spec)[0])
        by_op: dict[str, list] = {}
        for vnode in graph.vnodes.values():
            by_op.setdefault(vnode.op, []).append(vnode)
        blocks = by_op.get("attention") or by_op["fused_attention_heads"]
        attention, mlp = blocks[0].params, by_op["swiglu_mlp"][0].params
        return cls(vocab=graph.spec.vocab_size, context=graph.spec.context, dim=attention["dim"],
                   heads=attention["heads"], hidden=mlp["hidden"], layers=len(blocks))


class Attention(nn.Module):
    def __init__(self, s: GPTShape) -> None:
        super().__init__()
        self.heads = s.heads
        self.qkv = nn.Linear(s.dim, 3 * s.dim, bias=False)
        self.proj = nn.Linear(s.dim, s.dim, bias=False)
        head_dim = s.dim // s.heads
        inv_freq = 1.0 / ROPE_BASE ** (torch.arange(0, head_dim, 2).float() / head_dim)
        angles = torch.outer(torch.arange(s.context).float(), inv_freq)  # (T, hd/2)
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def rope(self, x: torch.Tensor) -> torch.Tensor:
        """Rotate the pairs (x[2i], x[2i+1]) of each head by position-dependent angles."""
        T = x.shape[-2]
        x1, x2 = x.unflatten(-1, (-1, 2)).unbind(-1)  # (B, H, T, hd/2) each
        cos, sin = self.cos[:T], self.sin[:T]
        return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = (t.view(B, T, self.heads, -1).transpose(1, 2) for t in self.qkv(x).split(C, dim=-1))  # (B, H, T, hd)
        y = F.scaled_dot_product_attention(self.rope(q), self.rope(k), v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(B, T, C))


class SwiGLU(nn.Module):
    def __init__(self, s: GPTShape) -> None:
        super().__init__()
        self.gate_up = nn.Linear(s.dim, 2 * s.hidden, bias=False)
        self.down = nn.Linear(s.hidden, s.dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up(x).chunk(2, dim=-1)
        return self.down(F.silu(gate) * up)


class Block(nn.Module):
    def __init__(self, s: GPTShape) -> None:
        super().__init__()
        self.norm1, self.attn = nn.RMSNorm(s.dim, eps=NORM_EPS), Attention(s)
        self.norm2, self.mlp = nn.RMSNorm(s.dim, eps=NORM_EPS), SwiGLU(s)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class GPT(nn.Module):
    """The whole model in one process: tokens (B, T) -> logits (B, T, vocab)."""

    def __init__(self, s: GPTShape, seed: int = 0) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.embed = nn.Embedding(s.vocab, s.dim)
        self.blocks = nn.ModuleList(Block(s) for _ in range(s.layers))
        self.norm_f = nn.RMSNorm(s.dim, eps=NORM_EPS)
        for name, p in self.named_parameters():
            if p.dim() == 2:
                nn.init.normal_(p, 0.0, 0.02 / (math.sqrt(2 * s.layers) if name.endswith(("proj.weight", "down.weight")) else 1))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)  # (B, T, dim)
        for block in self.blocks:
            x = block(x)
        return F.linear(self.norm_f(x), self.embed.weight)  # (B, T, vocab): tied head

    def param_groups(self, weight_decay: float) -> list[dict]:
        """nanoGPT's decay groups: the layers' matrices decay; norms and the (tied) embedding do not."""
        decayed = [p for p in self.parameters() if p.dim() >= 2 and p is not self.embed.weight]
        rest = [p for p in self.parameters() if all(p is not d for d in decayed)]
        return [{"params": decayed, "weight_decay": weight_decay}, {"params": rest, "weight_decay": 0.0}]

    @torch.no_grad()
    def load_vnode_weights(self, weights: dict[str, torch.Tensor], names: dict[str, str]) -> None:
        """Copy a run's weights (`<vnode>.<param>` -> tensor) into this model; `names` from `vnode_names`."""
        for name, p in self.named_parameters():
            p.copy_(weights[names[name]])

    def vnode_weights(self, names: dict[str, str]) -> dict[str, torch.Tensor]:
        """This model's weights under their VNode names (`<vnode>.<param>`)."""
        return {names[name]: p.detach() for name, p in self.named_parameters()}


def loss_fn(logits: torch.Tensor, targets: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction=reduction)


class NoCounterpart(ValueError):
    """The network has a VNode this model does not express."""


def vnode_names(spec: NetworkSpec) -> dict[str, str]:
    """{this model's parameter name: the VNode parameter it is} for a network of pre-norm blocks in
    one VNode per op (tiny-gpt's layout): the k-th attention and MLP VNodes are block k's, a norm is
    named by the VNode it feeds. Every parameter of the model is named exactly once."""
    graph = Graph(spec)
    names: dict[str, str] = {}
    counts = {"attention": 0, "swiglu_mlp": 0}

    def block(op: str) -> str:
        counts[op] += 1
        return f"blocks.{counts[op] - 1}"

    def norm(vid: str) -> None:
        fed = sorted({graph.vnodes[c].op for c in graph.consumers(vid)})
        place = {"attention": f"blocks.{counts['attention']}.norm1", "swiglu_mlp": f"blocks.{counts['swiglu_mlp']}.norm2",
                 "tied_lm_head_ce": "norm_f"}.get(fed[0]) if len(fed) == 1 else None
        if place is None:
            raise NoCounterpart(f"norm {vid} feeds {', '.join(fed)}, which the plain model has no place for")
        names[f"{place}.weight"] = f"{vid}.weight"

    parts = {
        "embedding": lambda vid: names.update({"embed.weight": f"{vid}.weight"}),
        "rmsnorm": norm,
        "attention": lambda vid: names.update({f"{b}.attn.{w}.weight": f"{vid}.{w}.weight"
                                               for b in [block("attention")] for w in ("qkv", "proj")}),
        "swiglu_mlp": lambda vid: names.update({f"{b}.mlp.{w}.weight": f"{vid}.{w}.weight"
                                                for b in [block("swiglu_mlp")] for w in ("gate_up", "down")}),
        "add": lambda vid: None,
        "tied_lm_head_ce": lambda vid: None,  # its weight is the embedding's
    }
    for vid in graph.order:
        op = graph.vnodes[vid].op
        if op not in parts:
            raise NoCounterpart(f"VNode {vid} is a {op}, which the plain model has no counterpart for")
        parts[op](vid)
    return names
