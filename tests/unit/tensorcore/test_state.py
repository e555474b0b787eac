"""Per-VNode checkpoint objects: safetensors keep dtypes, a bf16 run resumes exactly, bad bytes are refused."""

import io

import pytest
import torch
from safetensors.torch import load as load_tensors

from computeall.protocol.config import OptimizerConfig
from computeall.tensorcore.checkpoint import CheckpointError, load_vnode, read_vnode
from computeall.tensorcore.optimizer import VNodeOptimizer
from computeall.tensorcore.vnode_runtime import VNodeRuntime

from .helpers import saved_object as save_vnode
from .helpers import tiny_graph
from .test_optimizer import _train

CPU = torch.device("cpu")


def _load(runtime, optimizer, vid, blob, **kw):
    load_vnode(runtime, optimizer, vid, read_vnode(vid, io.BytesIO(blob)), **kw)


def _setup(graph, seed):
    runtime = VNodeRuntime(graph, graph.order, seed, CPU)
    return runtime, VNodeOptimizer(runtime.parameters(), OptimizerConfig(), runtime.decay_groups())


def test_objects_keep_dtypes_and_a_bf16_run_resumes_exactly():
    graph = tiny_graph("bf16", embed="fp32", head="fp32")
    runtime, optimizer = _setup(graph, 0)
    _train(graph, runtime, optimizer, 2)
    blobs = {v: save_vnode(runtime, optimizer, v) for v in graph.order}
    mlp = load_tensors(blobs["b0.mlp"])
    assert mlp["param/b0.mlp.gate_up.weight"].dtype == torch.bfloat16
    assert mlp["optim/b0.mlp.gate_up.weight.master"].dtype == torch.float32
    assert load_tensors(blobs["embed"])["param/embed.weight"].dtype == torch.float32
    expected = _train(graph, runtime, optimizer, 2, first=2)

    runtime2, optimizer2 = _setup(graph, 1)
    for v, blob in blobs.items():
        _load(runtime2, optimizer2, v, blob)
    assert _train(graph, runtime2, optimizer2, 2, first=2) == expected


def test_the_same_state_gives_the_same_bytes():
    graph = tiny_graph("bf16")
    runtime, optimizer = _setup(graph, 0)
    assert all(save_vnode(runtime, optimizer, v) == save_vnode(runtime, optimizer, v) for v in graph.order)


def test_unreadable_or_mismatched_objects_are_refused():
    graph = tiny_graph("fp32")
    runtime, optimizer = _setup(graph, 0)
    with pytest.raises(CheckpointError, match="not readable"):
        _load(runtime, optimizer, "b0.mlp", b"not safetensors")
    with pytest.raises(CheckpointError, match="lacks"):
        _load(runtime, optimizer, "b0.mlp", save_vnode(runtime, optimizer, "embed"))


def test_weights_only_takes_the_weights_and_their_masters_and_leaves_the_optimizer_fresh():
    """A new session's first weights: from a trained bf16 run, its fp32 masters; Adam starts from zero."""
    graph = tiny_graph("bf16", embed="fp32", head="fp32")
    runtime, optimizer = _setup(graph, 0)
    _train(graph, runtime, optimizer, 2)
    blobs = {v: save_vnode(runtime, optimizer, v) for v in graph.order}
    trained = optimizer.state_dict()

    runtime2, optimizer2 = _setup(graph, 1)
    fresh = optimizer2.state_dict()
    for v, blob in blobs.items():
        _load(runtime2, optimizer2, v, blob, weights_only=True)
    loaded = optimizer2.state_dict()
    for name, p in runtime.parameters().items():
        assert torch.equal(runtime2.parameters()[name], p)
        if f"{name}.master" in trained:
            assert torch.equal(loaded[f"{name}.master"], trained[f"{name}.master"])
        for key in ("exp_avg", "exp_avg_sq", "step"):
            assert torch.equal(loaded[f"{name}.{key}"], fresh[f"{name}.{key}"]), (name, key)
    assert not torch.equal(loaded["b0.mlp.gate_up.weight.exp_avg"], trained["b0.mlp.gate_up.weight.exp_avg"])
