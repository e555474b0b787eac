"""diloco's outer step and pseudo-gradient wire forms, against plain torch."""

import pytest
import torch

from computeall.protocol.config import OptimizerConfig
from computeall.protocol.replica_sync import ReplicaSync
from computeall.tensorcore.diloco import INT8_BLOCK, OuterOptimizer, decode, encode
from computeall.tensorcore.optimizer import VNodeOptimizer


@pytest.mark.parametrize("wire, bytes_per_element, tolerance", [("bf16", 2, 1e-2), ("int8", 1 + 4 / INT8_BLOCK, 1e-2)])
def test_wire_forms_round_trip_within_their_precision(wire, bytes_per_element, tolerance):
    t = torch.randn(10_000) * torch.logspace(-3, 1, 10_000)
    payload = encode(t, wire)
    assert payload.numel() * payload.element_size() == pytest.approx(t.numel() * bytes_per_element, rel=0.01)
    back = decode(payload, wire, t.numel())
    assert back.dtype == torch.float32 and back.shape == t.shape
    blockwise_max = t.abs().view(-1, 1000).amax(dim=1, keepdim=True).expand(-1, 1000).reshape(-1)
    assert ((back - t).abs() <= tolerance * blockwise_max + 1e-7).all()
    assert torch.equal(decode(encode(t, wire), wire, t.numel()), back), "the same bits every time"


def test_outer_step_is_nesterov_sgd_from_the_anchor_and_writes_low_precision_copies():
    sync = ReplicaSync(mode="diloco", outer_lr=0.8, outer_momentum=0.5)
    params = {"a.w": torch.nn.Parameter(torch.randn(4, 3)), "a.b": torch.nn.Parameter(torch.randn(3).bfloat16())}
    inner = VNodeOptimizer(params, OptimizerConfig())
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
        outer.step(names, delta + other, replicas=2)
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
