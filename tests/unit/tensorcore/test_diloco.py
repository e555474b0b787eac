"""diloco's outer step against plain torch, an overlapped one landing later, and its state mid-overlap (its wire
formats are `wire_formats`', its sparse messages `sparse_sync`', tested there)."""

import torch

from computeall.protocol.config import OptimizerConfig
from computeall.protocol.replica_sync import ReplicaSync, SparseCompression
from computeall.tensorcore.diloco import OuterOptimizer
from computeall.tensorcore.optimizer import VNodeOptimizer
from computeall.tensorcore.sparse_sync import decode


def test_outer_step_is_nesterov_sgd_from_the_anchor_and_writes_low_precision_copies():
    sync = ReplicaSync(mode="diloco", outer_lr=0.8, outer_momentum=0.5)
    params = {"a.w": torch.nn.Parameter(torch.randn(4, 3)), "a.b": torch.nn.Parameter(torch.randn(3).bfloat16())}
    inner = VNodeOptimizer(params, OptimizerConfig(), {name: "weights" for name in params})
    outer = OuterOptimizer(inner, sync)
    names = sorted(params)
    start = {n: outer.masters[n].clone() for n in names}
    reference = {n: torch.nn.Parameter(start[n].clone()) for n in names}
    sgd = torch.optim.SGD(reference.values(), lr=0.8, momentum=0.5, nesterov=True)
    for round_ in range(3):
        with torch.no_grad():
            for n in names:
                outer.masters[n].add_(torch.randn_like(outer.masters[n]) * 0.1)  # what the inner steps did
        delta = outer.pseudo_gradient(names)
        other = torch.randn_like(delta) * 0.1  # another replica's pseudo-gradient
        outer.step(names, delta + other, replicas=2, delta=delta)
        offset = 0
        for n in names:
            size = reference[n].numel()
            reference[n].grad = ((delta + other)[offset: offset + size] / 2).view_as(reference[n])
            offset += size
        sgd.step()
        for n in names:
            torch.testing.assert_close(outer.masters[n], reference[n].detach(), rtol=1e-6, atol=1e-6)
            torch.testing.assert_close(outer.anchor[n], outer.masters[n], rtol=0, atol=0)
    assert params["a.b"].dtype == torch.bfloat16 and torch.equal(params["a.b"], outer.masters["a.b"].bfloat16())
    saved = outer.state_dict(names)
    fresh = OuterOptimizer(inner, sync)
    fresh.load_state_dict(names, saved)
    assert all(torch.equal(fresh.momentum[n], outer.momentum[n]) for n in names)


def _inner(outer: OuterOptimizer, names: list[str], seed: int) -> dict[str, torch.Tensor]:
    """What some inner steps did to the parameters: a move of the masters, returned."""
    g = torch.Generator().manual_seed(seed)
    moves = {n: torch.randn(outer.masters[n].shape, generator=g) * 0.1 for n in names}
    with torch.no_grad():
        for n in names:
            outer.masters[n].add_(moves[n])
    return moves


def test_an_overlapped_outer_step_lands_later_and_keeps_what_the_inner_steps_learned_meanwhile():
    params = {"a.w": torch.nn.Parameter(torch.randn(4, 3)), "a.b": torch.nn.Parameter(torch.randn(3))}
    names = sorted(params)
    inner = VNodeOptimizer(params, OptimizerConfig(), {name: "weights" for name in params})
    outer = OuterOptimizer(inner, ReplicaSync(mode="diloco", inner_steps=4, overlap_steps=2,
                                              compression=SparseCompression(top_k=0.5)))
    anchor = {n: outer.anchor[n].clone() for n in names}
    _inner(outer, names, 0)
    delta = outer.pseudo_gradient(names)
    message = outer.message(names, delta)
    assert torch.equal(torch.cat([outer.error[n].reshape(-1) for n in names]),
                       delta - decode(message, delta.numel(), outer.sync.compression)), "the error keeps the rest"
    started = {n: outer.masters[n].clone() for n in names}
    outer.step(names, 2 * decode(message, delta.numel(), outer.sync.compression), replicas=2, delta=delta)
    assert all(torch.equal(outer.masters[n], started[n]) for n in names), "nothing moves before it lands"
    assert not all(torch.equal(outer.anchor[n], anchor[n]) for n in names)
    meanwhile = _inner(outer, names, 1)

    saved = outer.state_dict(names)  # mid-overlap: the step still to land is part of the state
    assert {k.rsplit(".", 1)[1] for k in saved} == {"anchor", "momentum", "error", "landing"}
    resumed_params = {n: torch.nn.Parameter(p.detach().clone()) for n, p in params.items()}
    resumed = OuterOptimizer(VNodeOptimizer(resumed_params, OptimizerConfig(), {n: "weights" for n in params}), outer.sync)
    resumed.load_state_dict(names, saved)

    for o in (outer, resumed):
        o.land(names)
        for n in names:  # the new anchor, plus what was learned since the sync started
            torch.testing.assert_close(o.masters[n], o.anchor[n] + meanwhile[n], rtol=0, atol=1e-6)
        assert not o.landing
    assert all(torch.equal(resumed.masters[n], outer.masters[n]) for n in names)
    assert all(torch.equal(resumed.error[n], outer.error[n]) for n in names)


def test_without_momentum_or_error_feedback_no_buffer_is_held():
    params = {"a.w": torch.nn.Parameter(torch.randn(4, 3))}
    inner = VNodeOptimizer(params, OptimizerConfig(), {"a.w": "weights"})
    outer = OuterOptimizer(inner, ReplicaSync(mode="diloco", outer_momentum=0.0,
                                              compression=SparseCompression(error_decay=0)))
    assert not outer.momentum and not outer.error
    assert set(outer.state_dict(["a.w"])) == {"outer/a.w.anchor"}
