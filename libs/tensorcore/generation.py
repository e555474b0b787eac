"""Sampling from a trained network, one new token at a time, with a KV cache.

The network runs VNode by VNode in graph order, as in training, with two changes: every
attention VNode keeps the keys and values of the positions it has seen (so a new token costs
one position's work, not the whole prefix's), and the loss VNode returns logits instead of a
loss. Which VNode op needs what is a registry (`CACHED_OPS`, `LOGIT_OPS`); every other op is
position-wise and runs its training module unchanged. Every edge carries its producer's wire
format, as in training (a bottleneck's int8 narrow edge included): no wire format mixes positions,
so the new positions read what they read in the whole sequence.

Sampling is seeded by its own generator: the same checkpoint, prompt and settings give the
same tokens every time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch
import torch.nn.functional as F
from torch import nn

from computeall.network.ops import OPS
from computeall.protocol.sampling import SamplingConfig

from .ops.attention import apply_rope, rope_tables
from .trained_model import TrainedModel
from .wire_formats import wire_format


TARGETS = "data.targets"  # read by the loss VNode only, which has no targets here


class GenerationError(ValueError):
    """A request the model cannot serve (a prompt too long for its context, ...)."""


class KVCache:
    """Keys and values of every attention VNode for positions 0..length-1, written in place.

    Each VNode's buffers are (B, H, context, head_dim), allocated on first use; `length` moves on
    once the whole network has seen the new positions.
    """

    def __init__(self, context: int) -> None:
        self.context = context
        self.length = 0
        self._kv: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
        self._rope: dict[tuple[int, float], tuple[torch.Tensor, torch.Tensor]] = {}

    def rope(self, head_dim: int, base: float, t: int) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin (t, head_dim/2) for the new positions length..length+t-1."""
        key = (head_dim, base)
        if key not in self._rope:
            self._rope[key] = rope_tables(self.context, head_dim, base, torch.device("cpu"))
        cos, sin = self._rope[key]
        return cos[self.length : self.length + t], sin[self.length : self.length + t]

    def extend(self, vid: str, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store the new positions' k, v (B, H, t, hd); the keys and values of every position so far."""
        B, H, t, hd = k.shape
        if vid not in self._kv:
            self._kv[vid] = (k.new_empty(B, H, self.context, hd), v.new_empty(B, H, self.context, hd))
        keys, values = self._kv[vid]
        end = self.length + t
        keys[:, :, self.length : end] = k
        values[:, :, self.length : end] = v
        return keys[:, :, :end], values[:, :, :end]


def _attend(cache: KVCache, vid: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, base: float) -> torch.Tensor:
    """Causal attention of the new positions over every cached one; q, k, v: (B, H, t, hd) before RoPE."""
    t, hd = q.shape[2], q.shape[3]
    cos, sin = cache.rope(hd, base, t)
    keys, values = cache.extend(vid, apply_rope(k, cos, sin), v)
    q = apply_rope(q, cos, sin)
    if t == 1:  # the usual decode step: the one new position sees everything
        return F.scaled_dot_product_attention(q, keys, values)
    if cache.length == 0:
        return F.scaled_dot_product_attention(q, keys, values, is_causal=True)
    mask = torch.ones(t, keys.shape[2], dtype=torch.bool).tril(cache.length)  # new position i sees 0..length+i
    return F.scaled_dot_product_attention(q, keys, values, attn_mask=mask)


def _multi_head(module: nn.Module, x: torch.Tensor, cache: KVCache, vid: str) -> torch.Tensor:
    """`attention` and `fused_attention_heads`: qkv rows [q_0..q_{H-1}; k...; v...], then the projection."""
    B, t, _ = x.shape
    H = module.heads
    hd = module.qkv.out_features // (3 * H)
    q, k, v = (z.view(B, t, H, hd).transpose(1, 2) for z in module.qkv(x).split(H * hd, dim=-1))  # (B, H, t, hd)
    y = _attend(cache, vid, q, k, v, module.rope_base)
    return module.proj(y.transpose(1, 2).reshape(B, t, H * hd))


def _one_head(module: nn.Module, x: torch.Tensor, cache: KVCache, vid: str) -> torch.Tensor:
    """`attention_head` (a head left unfused): rows [q; k; v], output (B, t, hd) for its concat VNode."""
    q, k, v = (z.unsqueeze(1) for z in module.qkv(x).split(module.head_dim, dim=-1))  # (B, 1, t, hd)
    return _attend(cache, vid, q, k, v, module.rope_base).squeeze(1)


# ops that mix positions: they read and extend the cache
CACHED_OPS: dict[str, Callable[[nn.Module, torch.Tensor, KVCache, str], torch.Tensor]] = {
    "attention": _multi_head,
    "fused_attention_heads": _multi_head,
    "attention_head": _one_head,
}

# loss ops: what they return instead of a loss (their inputs minus the targets)
LOGIT_OPS: dict[str, Callable[[nn.Module, torch.Tensor], torch.Tensor]] = {
    "tied_lm_head_ce": lambda module, x: x @ module.weight.T,  # (B, t, vocab)
}


class Generator:
    """A trained model that continues token sequences."""

    def __init__(self, model: TrainedModel) -> None:
        self.model = model
        self.graph = model.graph
        self.context = model.spec.context
        losses = [vid for vid in self.graph.order if OPS[self.graph.vnodes[vid].op].is_loss]
        if len(losses) != 1:
            raise GenerationError(f"generation needs exactly one loss VNode to read logits from; the network has {losses or 'none'}")
        self.logits_vnode = losses[0]
        self.wires = {vid: wire_format(self.graph.wire(vid)) for vid in self.graph.order}
        op = self.graph.vnodes[self.logits_vnode].op
        if op not in LOGIT_OPS:
            raise GenerationError(f"loss VNode {self.logits_vnode} ({op}) has no logits form; known: {', '.join(LOGIT_OPS)}")

    @torch.inference_mode()
    def forward(self, tokens: torch.Tensor, cache: KVCache) -> torch.Tensor:
        """Logits (B, t, vocab) of the new positions `tokens` (B, t), after the `cache.length` cached ones."""
        if cache.length + tokens.shape[1] > self.context:
            raise GenerationError(f"{cache.length + tokens.shape[1]} positions exceed the network's context of {self.context}")
        values: dict[str, torch.Tensor] = {"data.tokens": tokens}
        logits = None
        for vid in self.graph.order:
            spec = self.graph.vnodes[vid]
            module = self.model.modules[vid]
            inputs = [values[i] for i in spec.inputs if i != TARGETS]
            if vid == self.logits_vnode:
                logits = LOGIT_OPS[spec.op](module, *inputs)
            else:  # mixing positions through the cache, or position-wise: the training module as it is
                out = CACHED_OPS[spec.op](module, *inputs, cache, vid) if spec.op in CACHED_OPS else module(*inputs)
                values[vid] = self.wires[vid].encode(out).decode()
        cache.length += tokens.shape[1]
        return logits

    def generate(self, prompt: list[int], sampling: SamplingConfig) -> Iterator[int]:
        """The new tokens, one at a time: at most `max_new_tokens`, and never past the context."""
        if not prompt:
            raise GenerationError("the prompt has no tokens")
        if len(prompt) >= self.context:
            raise GenerationError(
                f"the prompt is {len(prompt)} tokens and the network's context is {self.context}: "
                f"shorten it to at most {self.context - 1} tokens so there is room to generate"
            )
        cache = KVCache(self.context)
        rng = torch.Generator().manual_seed(sampling.seed)
        budget = min(sampling.max_new_tokens, self.context - len(prompt))
        logits = self.forward(torch.tensor([prompt]), cache)[0, -1]
        for n in range(budget):
            token = sample(logits, sampling, rng)
            yield token
            if token == sampling.stop_token or n == budget - 1:
                return
            logits = self.forward(torch.tensor([[token]]), cache)[0, -1]


def sample(logits: torch.Tensor, sampling: SamplingConfig, rng: torch.Generator) -> int:
    """One token id from logits (vocab,): greedy at temperature 0, else top-k, then top-p, then a seeded draw."""
    logits = logits[: sampling.vocab_size]
    if sampling.temperature == 0:
        return int(logits.argmax())
    logits = logits.float() / sampling.temperature
    if sampling.top_k is not None and sampling.top_k < logits.numel():
        kth = logits.topk(sampling.top_k).values[-1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if sampling.top_p is not None and sampling.top_p < 1:
        sorted_logits, order = logits.sort(descending=True)
        cumulative = sorted_logits.softmax(-1).cumsum(-1)
        drop = cumulative - sorted_logits.softmax(-1) >= sampling.top_p  # mass before a token already reaches p
        logits = logits.masked_fill(torch.zeros_like(drop).scatter(0, order, drop), float("-inf"))
    return int(torch.multinomial(logits.softmax(-1), 1, generator=rng))
