"""Choose among interchangeable implementations by timing each once per workload key.

Dispatchers describe the eligible candidates (already filtered by device and dtype) as
thunks that run the workload on throwaway copies of the inputs. The fastest is remembered
per key for the life of the process. COMPUTEALL_KERNELS_TUNE=0 skips the timing and takes
the first candidate, which dispatchers list in their preferred order.
"""

import os
from typing import Callable, Hashable

import torch

from .timing import median_seconds


def next_pow2(n: int) -> int:
    """Shape bucket: workloads within a factor of two share one measurement."""
    return 1 << max(0, n - 1).bit_length()


class MeasuredChoice:
    def __init__(self) -> None:
        self._picks: dict[Hashable, str] = {}

    def pick(self, key: Hashable, device: torch.device, candidates: dict[str, Callable[[], object]]) -> str:
        if key in self._picks:
            return self._picks[key]
        names = list(candidates)
        if len(names) == 1 or os.environ.get("COMPUTEALL_KERNELS_TUNE", "1") == "0":
            return names[0]
        timings = {name: median_seconds(candidates[name], device, reps=2) for name in names}
        self._picks[key] = min(timings, key=timings.__getitem__)
        return self._picks[key]

    def picks(self) -> dict[Hashable, str]:
        """Every decision made so far (for benchmarks and logs)."""
        return dict(self._picks)


def run_forward_backward(fn: Callable[..., torch.Tensor], *inputs: torch.Tensor) -> Callable[[], None]:
    """A thunk running fn on detached copies of inputs, plus a backward when any input needs grad."""
    copies = [x.detach().requires_grad_(x.requires_grad) for x in inputs]
    needs_grad = torch.is_grad_enabled() and any(x.requires_grad for x in inputs)

    def run() -> None:
        with torch.set_grad_enabled(needs_grad):
            out = fn(*copies)
            if needs_grad:
                out.backward(torch.ones_like(out))
        for x in copies:
            x.grad = None

    return run
