"""A PNode's compute probe: in the allocator's units, per thread in CPU time, leaving torch as it found it."""

from __future__ import annotations

import math

import torch

from computeall.pnode.throughput import compute_flops_per_s


def test_the_probe_scales_one_threads_rate_and_restores_the_thread_count() -> None:
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        two = compute_flops_per_s(torch.device("cpu"))
        assert torch.get_num_threads() == 2
        torch.set_num_threads(1)
        one = compute_flops_per_s(torch.device("cpu"))
    finally:
        torch.set_num_threads(before)
    assert math.isfinite(one) and one > 1e8  # any CPU of this century does more than 0.1 GFLOP/s
    # both measured one thread in CPU time: the two-thread figure is about twice the other,
    # however busy the machine is (the best of a few tries each)
    assert 1.2 < two / one < 3.3
