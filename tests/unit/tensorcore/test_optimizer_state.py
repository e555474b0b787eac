"""The session's `optimizer.state`: int8 trains like fp32 Adam on a small problem, in at most 10 bytes
per bf16 parameter, and its state loads subset by subset, from either kind."""

import pytest
import torch

from computeall.network.memory_model import STATE_BYTES
from computeall.protocol.config import OptimizerConfig
from computeall.tensorcore.local_step import local_step
from computeall.tensorcore.optimizer import VNodeOptimizer
from computeall.tensorcore.vnode_runtime import VNodeRuntime

from .helpers import batch, tiny_graph

CPU = torch.device("cpu")


def _setup(state: str, precision: str = "bf16", seed: int = 0):
    graph = tiny_graph(precision)
    runtime = VNodeRuntime(graph, graph.order, seed, CPU)
    return graph, runtime, VNodeOptimizer(runtime.parameters(), OptimizerConfig(state=state), runtime.decay_groups())


def _train(graph, runtime, optimizer, steps, first=0, loss_scale=1.0):
    losses = []
    for s in range(first, first + steps):
        losses.append(local_step(runtime, [batch(graph, 8, seed=s % 16)], loss_scale).loss)
        optimizer.step(3e-3, loss_scale)
        runtime.zero_grad()
    return losses


@pytest.mark.parametrize("state", ["int8", "int8-sr"])
def test_8bit_moments_train_like_fp32_adam(state):
    """A small problem (the tiny GPT learning 16 batches by heart): after 120 steps the mean loss of the
    last ten is within 1% of fp32 Adam's, from the same start, with the master kept exactly or none."""
    fp32 = _train(*_setup("fp32"), 120)
    int8 = _train(*_setup(state), 120)
    assert fp32[0] == int8[0]
    assert fp32[-1] < 0.85 * fp32[0]  # it learns
    assert abs(sum(int8[-10:]) - sum(fp32[-10:])) <= 0.01 * sum(fp32[-10:])
    assert int8 != fp32  # it is another optimizer


def test_at_most_10_bytes_per_bf16_parameter_between_updates():
    _, runtime, optimizer = _setup("int8")
    params = runtime.parameters().values()
    n = sum(p.numel() for p in params)
    weights_and_grads = 2 * 2 * n
    held = optimizer.state_bytes()
    assert held["master"] == 2 * n
    assert weights_and_grads + held["master"] + held["optimizer"] <= 10 * n * 1.02  # the scales: 4 bytes a block
    assert held["optimizer"] == pytest.approx(STATE_BYTES["int8"].moments * n, rel=0.01)  # what the allocator counts
    _, runtime, fp32 = _setup("fp32")
    assert sum(fp32.state_bytes().values()) > 2.9 * sum(held.values())


def test_a_power_of_two_loss_scale_is_divided_out_exactly():
    a = _train(*_setup("int8"), 3)
    g, r, o = _setup("int8")
    assert _train(g, r, o, 3, loss_scale=1024.0) == a


@pytest.mark.parametrize("saved_by", ["int8", "fp32"])
def test_the_state_loads_subset_by_subset_and_goes_on_bit_for_bit(saved_by):
    """An int8 session's state round trips one VNode at a time (as checkpoints load); one saved by the fp32
    state loads too (quantized), and goes on as the int8 optimizer does from the same quantized state."""
    graph, runtime, optimizer = _setup(saved_by)
    _train(graph, runtime, optimizer, 2)
    weights = {n: p.detach().clone() for n, p in runtime.parameters().items()}
    state = optimizer.state_dict()

    def resumed():
        g2, r2, o2 = _setup("int8", seed=99)  # another init: everything must come from the state
        with torch.no_grad():
            for n, p in r2.parameters().items():
                p.copy_(weights[n])
        names = sorted(state)
        half = {k: v for k, v in state.items() if k < names[len(names) // 2]}
        o2.load_state_dict(half)
        o2.load_state_dict({k: v for k, v in state.items() if k not in half})
        return _train(g2, r2, o2, 2, first=2), r2

    first, r_a = resumed()
    second, r_b = resumed()
    assert first == second and all(torch.equal(p, q) for p, q in zip(r_a.parameters().values(), r_b.parameters().values()))
    if saved_by == "int8":
        assert first == _train(graph, runtime, optimizer, 2, first=2)


def test_an_fp32_optimizer_loads_an_8bit_state():
    graph, runtime, optimizer = _setup("int8")
    _train(graph, runtime, optimizer, 2)
    state = optimizer.state_dict()
    _, r2, o2 = _setup("fp32", seed=99)
    with torch.no_grad():
        for n, p in r2.parameters().items():
            p.copy_(runtime.parameters()[n])
    o2.load_state_dict(state)
    masters = o2.masters()
    for name, s in ((n, s) for opt in optimizer._int8 for n, s in opt.states.items()):
        assert torch.equal(masters[name], s.read_master().view_as(masters[name])), name
