"""A PNode's bytes by category: compute weights, master, optimizer state, gradients, activations."""

from types import SimpleNamespace

import torch

from computeall.kernels.blockwise_8bit import blocks_of
from computeall.pnode.memory import bytes_by_category, vnode_memory
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
    return bytes_by_category(vnode_memory("s", stage), 0)


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


def _stage(precision, state="fp32"):
    graph = tiny_graph(precision)
    runtime = VNodeRuntime(graph, graph.order, 0, torch.device("cpu"))
    optimizer = VNodeOptimizer(runtime.parameters(), OptimizerConfig(state=state), runtime.decay_groups())
    return graph, SimpleNamespace(runtime=runtime, optimizer=optimizer, audit=None)


def test_each_vnode_holds_its_own_parameters_state_and_activations():
    """bf16 with 8-bit state: 2 bytes of weight, 2 of master (the low half) and about 2 of moments per
    parameter, VNode by VNode; the tied head holds nothing of its own; the PNode's sums are the VNodes'."""
    graph, stage = _stage("bf16", "int8")
    tokens = batch(graph)
    values = {"data.tokens": tokens[:, :-1], "data.targets": tokens[:, 1:]}
    for vid in ("embed", "b0.norm1", "b0.attn"):  # a forward of the first VNodes only
        values[vid] = stage.runtime.forward(vid, 0, [values[i] for i in graph.vnodes[vid].inputs])
    rows = {v.vnode: v for v in vnode_memory("s", stage)}
    assert list(rows) == graph.order and {v.session_id for v in rows.values()} == {"s"}
    for vid, row in rows.items():
        sizes = [p.numel() for p in stage.runtime.vnode_parameters()[vid].values()]
        n = sum(sizes)
        assert row.params == n == (graph.param_count(vid) if not graph.vnodes[vid].tie else 0), vid
        assert (row.weights, row.master) == (2 * n, 2 * n), vid
        assert row.optimizer == 2 * sum(size + 4 * blocks_of(size) for size in sizes), vid  # codes, an fp32 scale a block
    assert rows["head"].params == 0 and rows["embed"].params == graph.param_count("embed")
    kept = {vid for vid, row in rows.items() if row.activations}
    assert kept == {"embed", "b0.norm1", "b0.attn"}
    b, t = values["data.tokens"].shape
    assert rows["b0.attn"].activations == b * t * 32 * 2  # its bf16 output, (B, T, dim)
    totals = bytes_by_category(list(rows.values()), 7)
    assert totals["checks"] == 7 and totals["params"] == sum(graph.param_count(v) for v in graph.order)
    for kind in ("weights", "master", "optimizer", "gradients", "activations"):
        assert totals[kind] == sum(getattr(r, kind) for r in rows.values())
