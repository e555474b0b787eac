"""The tiny-gpt network written with torch's own modules: what a torch user would pipeline.

nn.Embedding, nn.Linear, nn.RMSNorm, F.scaled_dot_product_attention with RoPE, a SwiGLU MLP and
an LM head tied to the embedding; the shape is read from the network YAML, so it is the same
model computeall trains (not the same init: torch's modules, one seed for the whole model).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from computeall.network import Graph, load_network_file
from computeall.network.head_fusion import fuse_heads


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
        """The shape of a network of attention blocks: all heads in one VNode, or one VNode per head
        (read in its fused form)."""
        graph = Graph(fuse_heads(load_network_file(path))[0])
        by_op = {}
        for spec in graph.vnodes.values():
            by_op.setdefault(spec.op, []).append(spec)
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
        inv_freq = 1.0 / 10000.0 ** (torch.arange(0, head_dim, 2).float() / head_dim)
        angles = torch.outer(torch.arange(s.context).float(), inv_freq)  # (T, hd/2)
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def rope(self, x: torch.Tensor) -> torch.Tensor:
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
        self.norm1, self.attn = nn.RMSNorm(s.dim, eps=1e-5), Attention(s)
        self.norm2, self.mlp = nn.RMSNorm(s.dim, eps=1e-5), SwiGLU(s)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class GPT(nn.Module):
    """The whole model in one process (the plain anchor) and the parts the stages are cut from."""

    def __init__(self, s: GPTShape, seed: int = 0) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.embed = nn.Embedding(s.vocab, s.dim)
        self.blocks = nn.ModuleList(Block(s) for _ in range(s.layers))
        self.norm_f = nn.RMSNorm(s.dim, eps=1e-5)
        for name, p in self.named_parameters():
            if p.dim() == 2:
                nn.init.normal_(p, 0.0, 0.02 / (math.sqrt(2 * s.layers) if name.endswith(("proj.weight", "down.weight")) else 1))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)  # (B, T, dim)
        for block in self.blocks:
            x = block(x)
        return F.linear(self.norm_f(x), self.embed.weight)  # (B, T, vocab): tied head


class FirstStage(nn.Module):
    def __init__(self, gpt: GPT, blocks: range) -> None:
        super().__init__()
        self.embed = gpt.embed
        self.blocks = nn.ModuleList(gpt.blocks[i] for i in blocks)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        return x  # (B, T, dim): what crosses the link


class LastStage(nn.Module):
    """The rest, with its own copy of the tied weight: both stages sum their gradients of it each step."""

    def __init__(self, gpt: GPT, blocks: range) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(gpt.blocks[i] for i in blocks)
        self.norm_f = gpt.norm_f
        self.head = nn.Parameter(gpt.embed.weight.detach().clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return F.linear(self.norm_f(x), self.head)  # (B, T, vocab)


def loss_fn(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


def batch(s: GPTShape, size: int, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Step `step`'s (tokens, targets): the same on every rank, a pure function of the step."""
    tokens = torch.randint(0, s.vocab, (size, s.context + 1), generator=torch.Generator().manual_seed(step))
    return tokens[:, :-1], tokens[:, 1:]
