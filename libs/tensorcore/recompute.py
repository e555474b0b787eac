"""Recompute one VNode of another PNode from its parameters and inputs: the checker's side of a spot check.

The VNode is rebuilt from its spec, given the host's parameters, and run through the same
`VNodeRuntime` the host trains with, for one micro-batch: forward, and backward from the
gradient its consumers handed back. The math is the host's to the last bit, on the same kind of
device with the same thread count; anything else in the results is the host's (or the checker's) fault.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from computeall.network import Graph

from .vnode_runtime import VNodeRuntime

TIED = "tied."  # a weight the VNode shares with another (the tied LM head's embedding)


def check_parameters(module: nn.Module) -> dict[str, torch.Tensor]:
    """The parameters recomputing this VNode needs, by name, in the order its backward takes them."""
    named = dict(module.named_parameters())
    named.update({f"{TIED}{i}": w for i, w in enumerate(getattr(module, "tied_weight", []))})
    return named


@dataclass
class Recomputed:
    output: torch.Tensor
    input_grads: list[torch.Tensor | None] | None = None  # one per input slot (None for dataset inputs)
    param_grads: list[torch.Tensor | None] | None = None  # in `check_parameters` order


class Recomputer:
    """Recomputes VNodes of one session; the last few VNodes' modules are kept to be loaded again."""

    def __init__(self, graph: Graph, session_seed: int, device: torch.device, keep: int = 8) -> None:
        self.graph = graph
        self.session_seed = session_seed
        self.device = device
        self.keep = keep
        self._runtimes: dict[str, VNodeRuntime] = {}  # least recently used first

    def run(self, vid: str, params: dict[str, torch.Tensor], inputs: list[torch.Tensor],
            grad_output: torch.Tensor | None = None) -> Recomputed:
        runtime = self._runtime(vid)
        expected = check_parameters(runtime.modules[vid])
        if set(params) != set(expected):
            raise ValueError(f"parameters for {vid} are {sorted(params)}, its module has {sorted(expected)}")
        with torch.no_grad():
            for name, p in expected.items():
                if params[name].shape != p.shape:
                    raise ValueError(f"parameter {name} of {vid} has shape {list(params[name].shape)}, not {list(p.shape)}")
                p.copy_(params[name].to(device=p.device, dtype=p.dtype))
        runtime.start_step(range(1), 1)  # one micro-batch: its gradients alone
        output = runtime.forward(vid, 0, inputs)
        if grad_output is None:
            runtime.drop()
            return Recomputed(output)
        input_grads = runtime.backward(vid, 0, grad_output)
        runtime.finish_backward()  # a borrowed (tied) weight's gradient, as the host's step adds it
        return Recomputed(output, input_grads, [p.grad for p in expected.values()])

    def _runtime(self, vid: str) -> VNodeRuntime:
        runtime = self._runtimes.pop(vid, None)
        if runtime is None:
            tie = self.graph.vnodes[vid].tie
            # not initialised: `run` overwrites every parameter with the host's (initialising was most of a build)
            runtime = VNodeRuntime(self.graph, [vid, *([tie] if tie else [])], self.session_seed, self.device, init=False)
        self._runtimes[vid] = runtime
        while len(self._runtimes) > self.keep:
            del self._runtimes[next(iter(self._runtimes))]
        return runtime
