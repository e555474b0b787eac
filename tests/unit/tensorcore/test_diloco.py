"""diloco's outer step against plain torch (its wire formats are `wire_formats`', tested there)."""

import pytest
import torch

from computeall.protocol.config import OptimizerConfig
from computeall.protocol.replica_sync import ReplicaSync
from computeall.tensorcore.diloco import OuterOptimizer
from computeall.tensorcore.optimizer import VNodeOptimizer


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
