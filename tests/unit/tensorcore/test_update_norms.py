"""The update-to-weight measurement: per VNode, the update's and the weights' squared norms, taken
around the optimizer's own step (which it runs exactly once)."""

import pytest
import torch
from torch import nn

from computeall.protocol.config import OptimizerConfig
from computeall.tensorcore.optimizer import VNodeOptimizer
from computeall.tensorcore.update_norms import measured_update


def optimizer_of(params: dict[str, nn.Parameter], state: str = "fp32") -> VNodeOptimizer:
    return VNodeOptimizer(params, OptimizerConfig(state=state), {name: "weights" for name in params})


@pytest.mark.parametrize("state", ["fp32", "int8"])
def test_norms_per_vnode_are_the_update_and_the_weights_before_it(state):
    torch.manual_seed(0)
    params = {"a.w": nn.Parameter(torch.randn(4, 3)), "a.v": nn.Parameter(torch.randn(5, 2)),
              "b.w": nn.Parameter(torch.randn(3, 3))}
    for p in params.values():
        p.grad = torch.randn_like(p)
    before = {name: p.detach().clone() for name, p in params.items()}
    optimizer = optimizer_of(params, state)

    updates, weights = measured_update({"a.w": "a", "a.v": "a", "b.w": "b"}, lambda: optimizer.measured_step(1e-2))

    def sq(tensors):
        return sum(float(t.double().pow(2).sum()) for t in tensors)

    assert updates.keys() == weights.keys() == {"a", "b"}
    for vid, names in (("a", ["a.w", "a.v"]), ("b", ["b.w"])):
        assert abs(weights[vid] - sq(before[n] for n in names)) <= 1e-5 * weights[vid]
        moved = sq(params[n].detach() - before[n] for n in names)
        assert moved > 0 and abs(updates[vid] - moved) <= 1e-4 * moved


def test_a_pnode_without_parameters_still_steps_and_measures_nothing():
    ran = []
    assert measured_update({}, lambda: ran.append(1) or optimizer_of({}).measured_step(1e-2)) == ({}, {})
    assert ran == [1]
