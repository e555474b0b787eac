"""save_state / load_state: safetensors bytes keep dtypes, carry a digest, restore training exactly."""

import pytest
import torch
from safetensors.torch import load as load_tensors

from computeall.protocol.config import OptimizerConfig
from computeall.tensorcore.checkpoint import load_vnode, save_vnode
from computeall.tensorcore.optimizer import VNodeOptimizer
from computeall.tensorcore.state import StateError, load_state, save_state
from computeall.tensorcore.vnode_runtime import VNodeRuntime

from .helpers import batch, run_step, tiny_graph
from .test_optimizer import _train

CPU = torch.device("cpu")


def _setup(graph, seed):
    runtime = VNodeRuntime(graph, graph.order, seed, CPU)
    return runtime, VNodeOptimizer(runtime.parameters(), OptimizerConfig())


def test_state_round_trip_keeps_dtypes_and_resumes_exactly():
    graph = tiny_graph("bf16", embed="fp32", head="fp32")
    runtime, optimizer = _setup(graph, 0)
    _train(graph, runtime, optimizer, 2)
    data = save_state(runtime, optimizer)
    tensors = load_tensors(data)
    assert tensors["param/b0.mlp.gate_up.weight"].dtype == torch.bfloat16
    assert tensors["param/embed.weight"].dtype == torch.float32
    assert tensors["optim/b0.mlp.gate_up.weight.master"].dtype == torch.float32
    expected = _train(graph, runtime, optimizer, 2, first=2)

    runtime2, optimizer2 = _setup(graph, 1)
    load_state(runtime2, optimizer2, data)
    assert _train(graph, runtime2, optimizer2, 2, first=2) == expected


def test_a_damaged_state_is_refused_before_anything_loads():
    graph = tiny_graph("bf16")
    runtime, optimizer = _setup(graph, 0)
    data = bytearray(save_state(runtime, optimizer))
    data[-3] ^= 0xFF  # a flipped bit in the last tensor
    runtime2, optimizer2 = _setup(graph, 1)
    before = {n: p.detach().clone() for n, p in runtime2.parameters().items()}
    with pytest.raises(StateError, match="digest"):
        load_state(runtime2, optimizer2, bytes(data))
    with pytest.raises(StateError):
        load_state(runtime2, optimizer2, b"not safetensors")
    assert all(torch.equal(before[n], p) for n, p in runtime2.parameters().items())


def test_per_vnode_checkpoints_resume_a_bf16_run_exactly():
    graph = tiny_graph("bf16")
    runtime, optimizer = _setup(graph, 0)
    _train(graph, runtime, optimizer, 2)
    blobs = {v: save_vnode(runtime, optimizer, v) for v in graph.order}
    expected = _train(graph, runtime, optimizer, 2, first=2)
    runtime2, optimizer2 = _setup(graph, 1)
    for v, blob in blobs.items():
        load_vnode(runtime2, optimizer2, v, blob)
    assert _train(graph, runtime2, optimizer2, 2, first=2) == expected
