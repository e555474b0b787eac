"""bench/llama1b.py's anchor is the network's own shape: transformers' LlamaForCausalLM built from a
Llama-shaped YAML (tiny-gpt here) has exactly the network's parameters."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))  # `bench` is no package of the distribution

from bench.llama1b import llama_shape  # noqa: E402
from computeall.network import Graph, load_network  # noqa: E402


def test_the_plain_llama_has_the_networks_parameters():
    from transformers import LlamaConfig, LlamaForCausalLM

    graph = Graph(load_network((REPO / "examples" / "networks" / "tiny-gpt.yaml").read_text()))
    model = LlamaForCausalLM(LlamaConfig(**llama_shape(graph)))
    assert sum(p.numel() for p in model.parameters()) == sum(graph.param_count(v) for v in graph.order)
