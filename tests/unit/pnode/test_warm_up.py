"""A PNode's warm-up step takes every way a session computes, so its first session's step sets up nothing new."""

from __future__ import annotations

from typing import get_args

import torch

from computeall.pnode import warm_up as module
from computeall.protocol.config import OptimizerState


def test_the_warm_up_updates_in_every_precision_with_every_optimizer_state(monkeypatch):
    taken: list[tuple[str, str]] = []  # (weights' dtype, optimizer state) of each update
    real = module.VNodeOptimizer

    class Recorded(real):
        def step(self, *args, **kwargs):
            weight = next(iter(self.params.values()))
            taken.append((str(weight.dtype), self.state))
            return super().step(*args, **kwargs)

    monkeypatch.setattr(module, "VNodeOptimizer", Recorded)
    module.warm_up(torch.device("cpu"))
    assert sorted(set(taken)) == sorted({(str(dtype), state) for dtype in (torch.float32, torch.bfloat16)
                                         for state in get_args(OptimizerState)})
    assert len(taken) == 2 * len(module.WAYS) * len(get_args(OptimizerState)), "two steps of each"
