"""VNodeOptimizer: fused AdamW with fp32 masters and state, unscaling inside, persistence, bytes."""

import pytest
import torch

from computeall.protocol.config import OptimizerConfig
from computeall.tensorcore.local_step import local_step
from computeall.tensorcore.optimizer import VNodeOptimizer
from computeall.tensorcore.vnode_runtime import VNodeRuntime

from .helpers import batch, tiny_graph

CPU = torch.device("cpu")


def _setup(precision="bf16", seed=0):
    graph = tiny_graph(precision)
    runtime = VNodeRuntime(graph, graph.order, seed, CPU)
    return graph, runtime, VNodeOptimizer(runtime.parameters(), OptimizerConfig(), runtime.decay_groups())


def _train(graph, runtime, optimizer, steps, loss_scale=1.0, first=0):
    losses = []
    for s in range(first, first + steps):
        loss = local_step(runtime, [batch(graph, seed=s)], loss_scale).loss_sum
        optimizer.step(1e-2, loss_scale)
        runtime.zero_grad()
        losses.append(loss)
    return losses


def test_bf16_parameters_are_the_rounded_fp32_masters_after_each_step():
    graph, runtime, optimizer = _setup("bf16")
    params = runtime.parameters()
    before = {n: p.detach().clone() for n, p in params.items()}
    _train(graph, runtime, optimizer, 2)
    masters = {k[: -len(".master")]: v for k, v in optimizer.state_dict().items() if k.endswith(".master")}
    assert masters.keys() == params.keys()
    for name, p in runtime.parameters().items():
        assert p is params[name] and p.dtype == torch.bfloat16  # same Parameter objects, updated in place
        assert masters[name].dtype == torch.float32
        assert torch.equal(p, masters[name].to(torch.bfloat16)), name
    assert any(not torch.equal(before[n], p) for n, p in params.items())


def test_fp32_parameters_are_their_own_master():
    _, _, optimizer = _setup("fp32")
    assert not any(k.endswith(".master") for k in optimizer.state_dict())
    assert optimizer.state_bytes()["master"] == 0


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_a_power_of_two_loss_scale_is_divided_out_inside_the_step_exactly(precision):
    """Multiplying by 2^10 and dividing by it again only moves exponents: the same bits as no scaling."""
    g1, r1, o1 = _setup(precision)
    g2, r2, o2 = _setup(precision)
    a = _train(g1, r1, o1, 3, loss_scale=1.0)
    b = _train(g2, r2, o2, 3, loss_scale=1024.0)
    assert b == a
    for (n, p), q in zip(r1.parameters().items(), r2.parameters().values()):
        assert torch.equal(p, q), n


def test_fp16_gradients_need_the_loss_scale():
    """Unscaled fp16 gradients underflow to zero where scaled ones do not (why fp16 trains with a loss
    scale), so the two runs part after the first update: the first loss is equal, the weights are not."""
    g1, r1, o1 = _setup("fp16")
    g2, r2, o2 = _setup("fp16")
    a = _train(g1, r1, o1, 3, loss_scale=1.0)
    b = _train(g2, r2, o2, 3, loss_scale=1024.0)
    assert a[0] == b[0]
    assert b == pytest.approx(a, rel=1e-3)
    assert any(not torch.equal(p, q) for p, q in zip(r1.parameters().values(), r2.parameters().values()))


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_state_dict_round_trip_continues_bit_for_bit(precision):
    graph, runtime, optimizer = _setup(precision)
    _train(graph, runtime, optimizer, 2)
    weights = {n: p.detach().clone() for n, p in runtime.parameters().items()}
    state = optimizer.state_dict()
    assert all(v.dtype == torch.float32 for v in state.values())
    expected = _train(graph, runtime, optimizer, 2, first=2)

    g2, r2, o2 = _setup(precision, seed=99)  # other init: everything must come from the state
    with torch.no_grad():
        for n, p in r2.parameters().items():
            p.copy_(weights[n])  # copy into the parameter: the optimizer holds it as a view
    names = sorted(state)
    half = {k: v for k, v in state.items() if k < names[len(names) // 2]}
    o2.load_state_dict(half)  # any subset loads (one VNode at a time, as checkpoints do)
    o2.load_state_dict({k: v for k, v in state.items() if k not in half})
    assert _train(g2, r2, o2, 2, first=2) == expected


def test_state_bytes_by_category_per_parameter():
    for precision, master in (("fp32", 0), ("bf16", 4), ("fp16", 4)):
        _, runtime, optimizer = _setup(precision)
        n = sum(p.numel() for p in runtime.parameters().values())
        got = optimizer.state_bytes()
        assert got["master"] == master * n
        assert got["optimizer"] // n == 8  # fp32 exp_avg + exp_avg_sq (+ a few step counters)
        assert set(got) == {"master", "optimizer"}  # the flat gradient exists only during an update
