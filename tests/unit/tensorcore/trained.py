"""Checkpoints of a network written by the real checkpoint code, for the generation and export tests.

The weights are the seeded init plus seeded noise, so norms are not all ones and every tensor
matters; the reference logits come from the training modules themselves (VNodeRuntime).
"""

from __future__ import annotations

from pathlib import Path

import torch

from computeall.network import Graph, load_network
from computeall.network.head_fusion import fuse_heads
from computeall.network.vocab_split import split_vocab
from computeall.network.ops import OPS
from computeall.protocol.config import OptimizerConfig
from computeall.tensorcore.optimizer import VNodeOptimizer
from computeall.tensorcore.vnode_runtime import VNodeRuntime

from .helpers import saved_object

NETWORKS = Path(__file__).resolve().parents[3] / "examples" / "networks"
CPU = torch.device("cpu")


def network_yaml(name: str) -> str:
    return (NETWORKS / f"{name}.yaml").read_text()


def checkpoint(yaml: str, fused: bool = False, seed: int = 5, split: bool = False) -> tuple[VNodeRuntime, dict[str, bytes]]:
    """A runtime hosting the whole network (fused or as written; `split`: its vocabulary in shards, as a
    session runs it) and its checkpoint objects."""
    spec = load_network(yaml)
    spec = fuse_heads(spec)[0] if fused else spec
    graph = Graph(split_vocab(spec)[0] if split else spec)
    runtime = VNodeRuntime(graph, graph.order, seed, CPU)
    noise = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in runtime.parameters().values():
            p.add_(torch.randn(p.shape, generator=noise) * 0.05)
    optimizer = VNodeOptimizer(runtime.parameters(), OptimizerConfig(), runtime.decay_groups())
    return runtime, {vid: saved_object(runtime, optimizer, vid) for vid in graph.order}


def reference_logits(runtime: VNodeRuntime, tokens: torch.Tensor) -> torch.Tensor:
    """Logits (B, T, vocab) by the training modules: every VNode but the loss, then x @ tied weight.T."""
    graph = runtime.graph
    values = {"data.tokens": tokens}
    with torch.no_grad():
        for vid in graph.order:
            spec = graph.vnodes[vid]
            module = runtime.modules[vid]
            if OPS[spec.op].is_loss:
                return values[spec.inputs[0]] @ module.weight.T
            values[vid] = module(*(values[i] for i in spec.inputs))
    raise AssertionError("the network has no loss VNode")


def tokenizer_json() -> str:
    """A small byte-level BPE trained by the dataset service's own code."""
    from computeall.dataset.tokenizer import train

    docs = ["def generate(prompt, steps):\n    return prompt * steps\n", "the model reads the tokens it wrote"] * 20
    return train(docs, 300, len(docs)).to_str()
