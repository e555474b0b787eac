"""A PNode's bytes by category: compute weights, master, optimizer state, gradients, activations."""

from types import SimpleNamespace

import torch

from computeall.pnode.memory import bytes_by_category
from computeall.protocol.config import OptimizerConfig
from computeall.tensorcore.optimizer import VNodeOptimizer
from computeall.tensorcore.vnode_runtime import VNodeRuntime

from .helpers import batch, tiny_graph


def _categories(precision):
    graph = tiny_graph(precision)
    runtime = VNodeRuntime(graph, graph.order, 0, torch.device("cpu"))
    stage = SimpleNamespace(runtime=runtime, optimizer=VNodeOptimizer(runtime.parameters(), OptimizerConfig(), runtime.decay_groups()),
                            audit=None)
    tokens = batch(graph)
    values = {"data.tokens": tokens[:, :-1], "data.targets": tokens[:, 1:]}
    for vid in runtime.order:  # a forward: activations held for backward
        values[vid] = runtime.forward(vid, 0, [values[i] for i in graph.vnodes[vid].inputs])
    return bytes_by_category(stage)


def test_bytes_per_parameter_by_category():
    fp32, bf16 = _categories("fp32"), _categories("bf16")
    n = fp32["params"]
    assert bf16["params"] == n
    per = {k: {c: v / n for c, v in d.items() if c != "params"} for k, d in (("fp32", fp32), ("bf16", bf16))}
    assert per["fp32"]["weights"] == 4 and per["bf16"]["weights"] == 2
    assert per["fp32"]["master"] == 0 and per["bf16"]["master"] == 4
    assert 8 <= per["fp32"]["optimizer"] < 8.01 and per["bf16"]["optimizer"] == per["fp32"]["optimizer"]
    # no .grad before a backward, and no resident flat copy: the optimizer makes one for each update only
    assert per["fp32"]["gradients"] == 0 == per["bf16"]["gradients"]
    assert abs(bf16["activations"] / fp32["activations"] - 0.5) < 1e-3
