"""Sampling from a trained network, one new token at a time, with a KV cache.

The network runs VNode by VNode in graph order, as in training, with two changes: every
attention VNode keeps the keys and values of the positions it has seen (so a new token costs
one position's work, not the whole prefix's), and the loss VNode returns logits instead of a
loss. Which op runs how is its registry entry's `generation` (`computeall.network.ops`): a
position-wise op runs its training module unchanged, one that mixes positions its module's
`forward_cached` over the `KVCache`, the loss its module's `logits`. Every edge carries its
producer's wire format, as in training (a bottleneck's int8 narrow edge included): no wire format
mixes positions, so the new positions read what they read in the whole sequence.

Sampling is seeded by its own generator: the same checkpoint, prompt and settings give the
same tokens every time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch
import torch.nn.functional as F
from torch import nn

from computeall.network.ops import OPS, Generation
from computeall.protocol.sampling import SamplingConfig

from .ops.attention import apply_rope, rope_tables
from .trained_model import TrainedModel
from .wire_formats import wire_format


TARGETS = "data.targets"  # read by the loss VNode only, which has no targets here


class GenerationError(ValueError):
    """A request the model cannot serve (a prompt too long for its context, ...)."""


class KVCache:
    """Keys and values of every attention VNode for positions 0..length-1, written in place.

    Each VNode's buffers are (B, KV heads, context, head_dim), allocated on first use; `length` moves on
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

    def attend(self, vid: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, base: float) -> torch.Tensor:
        """Causal attention of the new positions over every cached one; q (B, H, t, hd), k and v (B, KV, t, hd)
        before RoPE, with KV dividing H (grouped-query attention: the cache holds only the KV heads)."""
        t, hd = q.shape[2], q.shape[3]
        cos, sin = self.rope(hd, base, t)
        keys, values = self.extend(vid, apply_rope(k, cos, sin), v)
        q = apply_rope(q, cos, sin)
        gqa = keys.shape[1] != q.shape[1]
        if t == 1:  # the usual decode step: the one new position sees everything
            return F.scaled_dot_product_attention(q, keys, values, enable_gqa=gqa)
        if self.length == 0:
            return F.scaled_dot_product_attention(q, keys, values, is_causal=True, enable_gqa=gqa)
        mask = torch.ones(t, keys.shape[2], dtype=torch.bool).tril(self.length)  # new position i sees 0..length+i
        return F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, enable_gqa=gqa)

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


# what a VNode runs for the new positions, by its op's `generation` (`OpSpec.generation`)
STEPS: dict[Generation, Callable[[nn.Module, list[torch.Tensor], KVCache, str], torch.Tensor]] = {
    "position_wise": lambda module, inputs, cache, vid: module(*inputs),
    "kv_cache": lambda module, inputs, cache, vid: module.forward_cached(*inputs, cache, vid),
    "logits": lambda module, inputs, cache, vid: module.logits(*inputs),  # (B, t, vocab)
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
        if OPS[op].generation != "logits":
            known = ", ".join(name for name, entry in OPS.items() if entry.generation == "logits")
            raise GenerationError(f"loss VNode {self.logits_vnode} ({op}) has no logits form; known: {known}")
        refused = [f"{vid} ({v.op})" for vid, v in self.graph.vnodes.items() if OPS[v.op].generation is None]
        if refused:
            raise GenerationError(f"generation cannot run {', '.join(refused)}: their ops have no sampling form")

    @torch.inference_mode()
    def forward(self, tokens: torch.Tensor, cache: KVCache) -> torch.Tensor:
        """Logits (B, t, vocab) of the new positions `tokens` (B, t), after the `cache.length` cached ones."""
        if cache.length + tokens.shape[1] > self.context:
            raise GenerationError(f"{cache.length + tokens.shape[1]} positions exceed the network's context of {self.context}")
        values: dict[str, torch.Tensor] = {"data.tokens": tokens}
        for vid in self.graph.order:
            spec = self.graph.vnodes[vid]
            module = self.model.modules[vid]
            inputs = [values[i] for i in spec.inputs if i != TARGETS]
            out = STEPS[OPS[spec.op].generation](module, inputs, cache, vid)
            values[vid] = out if vid == self.logits_vnode else self.wires[vid].encode(out).decode()
        logits = values[self.logits_vnode]
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
