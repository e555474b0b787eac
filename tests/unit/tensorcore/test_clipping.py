"""Global gradient-norm clipping: per-VNode squared norms from any split of the network, combined by the
orchestrator's rule, equal torch's `clip_grad_norm_` on the single-process reference, and every split
gives the same bits."""

import pytest
import torch

from computeall.protocol import clipping
from computeall.protocol.config import OptimizerConfig
from computeall.protocol.pnode_api import PNodeReply
from computeall.tensorcore.local_step import local_step
from computeall.tensorcore.optimizer import VNodeOptimizer
from computeall.tensorcore.reference_model import ReferenceModel
from computeall.tensorcore.vnode_runtime import VNodeRuntime

from .helpers import batch, tiny_graph

CPU = torch.device("cpu")
SEED = 5
# a large eps makes Adam's update follow the gradient's size (with a small one the first update is
# about lr * sign(grad) and would not show a clip)
ADAM = OptimizerConfig(eps=1e-2)


def split(graph, parts: int) -> list[VNodeRuntime]:
    """The graph cut into `parts` runtimes standing for PNodes (the tied pair stays together)."""
    order = graph.order
    cuts = [order[i * len(order) // parts:(i + 1) * len(order) // parts] for i in range(parts)]
    cuts[0] += [v for c in cuts[1:] for v in c if v == "head"]
    cuts = [cuts[0]] + [[v for v in c if v != "head"] for c in cuts[1:]]
    return [VNodeRuntime(graph, c, SEED, CPU) for c in cuts]


def clip_of(runtimes: list[VNodeRuntime], max_norm: float, loss_scale: float = 1.0) -> clipping.Clip:
    replies = [PNodeReply(ok=True, pnode=f"p{i}", grad_sq_norms=r.grad_sq_norms(loss_scale)) for i, r in enumerate(runtimes)]
    return clipping.decide(replies, max_norm)


def test_global_norm_and_clipped_update_equal_clip_grad_norm_on_the_reference():
    graph = tiny_graph()
    micro = [batch(graph, n=2, seed=s) for s in range(2)]
    model = ReferenceModel(graph, SEED)
    whole = torch.cat(micro)
    (model(whole[:, :-1], whole[:, 1:]) / whole[:, 1:].numel()).backward()
    reference = model.named_vnode_parameters()
    unclipped = {n: p.grad.clone() for n, p in reference.items()}
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=0.05)
    before = {n: p.detach().clone() for n, p in reference.items()}
    VNodeOptimizer(reference, ADAM, model.decay_groups()).step(1e-2)

    # the norm of gradients computed VNode by VNode over three "PNodes", micro-batch by micro-batch
    runtimes = split(graph, 3)
    local_step(runtimes, micro, loss_scale=8.0)
    assert clip_of(runtimes, max_norm=0.05, loss_scale=8.0).grad_norm == pytest.approx(norm.item(), rel=1e-6)

    # the same gradients as the reference's, clipped the distributed way: the same update
    for r in runtimes:
        for name, p in r.parameters().items():
            p.grad = unclipped[name].clone()
    clip = clip_of(runtimes, max_norm=0.05)
    assert clip.clipped and clip.factor < 0.5
    assert clip.grad_norm == pytest.approx(norm.item(), rel=1e-6)
    for r in runtimes:
        VNodeOptimizer(r.parameters(), ADAM, r.decay_groups()).step(1e-2, clip_factor=clip.factor)
    params = {n: p for r in runtimes for n, p in r.parameters().items()}
    for name, p in params.items():
        torch.testing.assert_close(p, reference[name], rtol=1e-6, atol=1e-6, msg=name)
    # and the clip mattered: the unclipped update is elsewhere
    unclipped_model = ReferenceModel(graph, SEED)
    for name, p in unclipped_model.named_vnode_parameters().items():
        p.grad = unclipped[name].clone()
    VNodeOptimizer(unclipped_model.named_vnode_parameters(), ADAM, unclipped_model.decay_groups()).step(1e-2)
    moved = {n: (p - before[n]).abs().max().item() for n, p in unclipped_model.named_vnode_parameters().items()}
    assert max(abs((params[n] - before[n]).abs().max().item() - moved[n]) for n in params) > 1e-4


def test_the_loss_scale_is_divided_out_of_the_norms():
    graph = tiny_graph()
    micro = [batch(graph, n=2, seed=s) for s in range(2)]
    norms = []
    for scale in (1.0, 1024.0):
        runtimes = split(graph, 2)
        local_step(runtimes, micro, loss_scale=scale)
        norms.append(clip_of(runtimes, max_norm=1.0, loss_scale=scale).grad_norm)
    assert norms[1] == pytest.approx(norms[0], rel=1e-6)


def test_any_split_gives_the_same_norm_factor_and_parameters_bit_for_bit():
    graph = tiny_graph()
    micro = [batch(graph, n=2, seed=s) for s in range(2)]
    params, clips = [], []
    for parts in (1, 3):
        runtimes = split(graph, parts)
        optimizers = [VNodeOptimizer(r.parameters(), OptimizerConfig(), r.decay_groups()) for r in runtimes]
        for step in range(3):
            local_step(runtimes, micro)
            clip = clip_of(runtimes, max_norm=0.2)
            for r, opt in zip(runtimes, optimizers):
                opt.step(1e-2, clip_factor=clip.factor)
                r.zero_grad()
            clips.append((parts, clip))
        params.append({n: p.detach().clone() for r in runtimes for n, p in r.parameters().items()})
    assert [c for p, c in clips if p == 1] == [c for p, c in clips if p == 3]
    assert all(c.clipped for _, c in clips)
    assert params[0].keys() == params[1].keys()
    for name in params[0]:
        assert torch.equal(params[0][name], params[1][name]), name


def test_no_clip_below_the_limit_or_when_off_and_none_on_overflow():
    finite = [PNodeReply(ok=True, pnode="a", grad_sq_norms={"x": 9.0}), PNodeReply(ok=True, pnode="b", grad_sq_norms={"y": 16.0})]
    assert clipping.decide(finite, 10.0) == clipping.Clip(5.0, 1.0)
    assert clipping.decide(finite, 0.0) == clipping.Clip(5.0, 1.0)  # off: the norm is still reported
    assert clipping.decide(finite, 1.0).factor == pytest.approx(1.0 / (5.0 + 1e-6))
    overflowed = finite + [PNodeReply(ok=True, pnode="c", grads_finite=False)]
    assert clipping.decide(overflowed, 1.0) == clipping.Clip(None, 1.0)


def test_a_nonfinite_gradient_reports_no_norms():
    graph = tiny_graph()
    runtime = VNodeRuntime(graph, graph.order, SEED, CPU)
    local_step(runtime, [batch(graph)])
    assert set(runtime.grad_sq_norms()) == {v for v in graph.order if runtime.vnode_parameters()[v]}
    for bad in (float("inf"), float("nan")):
        runtime.parameters()["b0.mlp.down.weight"].grad[0, 0] = bad
        assert runtime.grad_sq_norms() is None
