"""Per-VNode forward and backward, with an autograd boundary at every VNode.

Every input of a VNode (local or remote) enters as a fresh leaf, so each VNode's
backward is its own small autograd call: gradients flow VNode by VNode, in the
same order whichever PNode hosts what. That is what makes a session on 1 PNode and
on 5 PNodes compute the same numbers, and what lets a PNode start the backward of
one VNode while another PNode still works on a later one.

Precision: each VNode's parameters, compute and output are in its own precision (`spec.precision`).
An input arriving in another precision is cast to it *inside* the VNode's graph, after the leaf,
so the gradient handed back to the producer is in the producer's dtype. Parameters are never
re-bound (`p.data = ...`): the optimizer keeps them as views into its flat buffers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

import torch
from torch import nn

from computeall.network import Graph
from computeall.network.ops import DATA_INPUTS

from computeall.kernels import found_nonfinite

from .ops import build_vnode
from .precision import cast_input, dtype_of


@dataclass
class _Saved:
    leaves: list[torch.Tensor | None]  # None for dataset inputs (token ids)
    output: torch.Tensor


class RuntimeObserver(Protocol):
    """Sees each VNode result as it is handed on, and hands on what it returns (spot-check ledgers,
    fault injection: `computeall.pnode.audit`). It must not change a tensor in place."""

    def forward_done(self, vid: str, micro: int, inputs: list[torch.Tensor], output: torch.Tensor) -> torch.Tensor: ...

    def backward_done(self, vid: str, micro: int, input_grads: list[torch.Tensor | None],
                      param_grads: Sequence[torch.Tensor | None]) -> list[torch.Tensor | None]: ...


class VNodeRuntime:
    """The VNodes one PNode hosts, for one session."""

    def __init__(self, graph: Graph, vnode_ids: list[str], session_seed: int, device: torch.device) -> None:
        self.graph = graph
        self.device = device
        self.order = [v for v in graph.order if v in set(vnode_ids)]
        self.dtypes = {v: dtype_of(graph.vnodes[v].precision) for v in self.order}
        self.modules: dict[str, nn.Module] = {}
        # tied VNodes point at their partner, so build the partners (embeddings) first
        for vid in sorted(self.order, key=lambda v: graph.vnodes[v].tie is not None):
            self.modules[vid] = build_vnode(graph.vnodes[vid], session_seed, device, tied=self.modules)
        self._saved: dict[tuple[int, str], _Saved] = {}
        # a weight borrowed from another VNode (the tied LM head's) gets its gradient here, apart from
        # the owner's, and `finish_backward` adds it: the schedule may interleave the two VNodes'
        # backwards in any way, the shared weight's sum is always (owner's) + (borrower's)
        self._borrowed_grads: dict[str, torch.Tensor] = {}
        self.observer: RuntimeObserver | None = None

    def parameters(self) -> dict[str, nn.Parameter]:
        """Every parameter once, named `<vnode>.<param>` (a tied weight under its owner)."""
        out: dict[str, nn.Parameter] = {}
        for vid in self.order:
            for name, p in self.modules[vid].named_parameters():
                out[f"{vid}.{name}"] = p
        return out

    def forward(self, vid: str, micro: int, inputs: list[torch.Tensor]) -> torch.Tensor:
        """Run one VNode; keep what its backward needs under (micro, vid)."""
        spec = self.graph.vnodes[vid]
        leaves: list[torch.Tensor | None] = []
        args = []
        for name, x in zip(spec.inputs, inputs):
            if name in DATA_INPUTS:
                leaves.append(None)
                args.append(x)
            else:
                leaf = x.detach().requires_grad_(True)
                leaves.append(leaf)
                args.append(leaf)
        with torch.enable_grad():
            out = self.modules[vid](*(cast_input(a, self.dtypes[vid]) for a in args))
        self._saved[(micro, vid)] = _Saved(leaves, out)
        out = out.detach()
        return out if self.observer is None else self.observer.forward_done(vid, micro, inputs, out)

    def backward(self, vid: str, micro: int, grad_output: torch.Tensor) -> list[torch.Tensor | None]:
        """Backward of one VNode; accumulates its parameters' gradients, returns its inputs' gradients."""
        saved = self._saved.pop((micro, vid))
        leaves = [leaf for leaf in saved.leaves if leaf is not None]
        params = list(self.modules[vid].parameters())
        borrowed = list(getattr(self.modules[vid], "tied_weight", []))
        grad_output = grad_output.to(device=saved.output.device, dtype=saved.output.dtype)
        grads = torch.autograd.grad(
            saved.output, leaves + params + borrowed, grad_outputs=grad_output, allow_unused=True
        )
        for p, g in zip(params, grads[len(leaves):]):
            if g is not None:
                p.grad = g if p.grad is None else p.grad.add_(g)
        for g in grads[len(leaves) + len(params):]:
            if g is not None:
                held = self._borrowed_grads.get(vid)
                self._borrowed_grads[vid] = g if held is None else held.add_(g)
        it = iter(grads[: len(leaves)])
        input_grads = [None if leaf is None else next(it) for leaf in saved.leaves]
        if self.observer is None:
            return input_grads
        return self.observer.backward_done(vid, micro, input_grads, grads[len(leaves):])

    def finish_backward(self) -> None:
        """Once a step's backwards are all done: add the borrowed weights' gradients to their owners',
        in topological order (the same on every placement and schedule)."""
        for vid in self.order:
            g = self._borrowed_grads.pop(vid, None)
            if g is not None:
                (weight,) = self.modules[vid].tied_weight
                weight.grad = g if weight.grad is None else weight.grad.add_(g)

    def drop_one(self, micro: int, vid: str) -> None:
        self._saved.pop((micro, vid), None)

    def drop(self, micro: int | None = None) -> None:
        """Forget saved activations (of one micro-batch, or all): after an abort."""
        for key in [k for k in self._saved if micro is None or k[0] == micro]:
            del self._saved[key]

    def zero_grad(self) -> None:
        self._borrowed_grads.clear()
        for p in self.parameters().values():
            p.grad = None

    def grads_finite(self) -> bool:
        """No inf or nan in any gradient held here (one device reduction, one host read)."""
        grads = [p.grad for p in self.parameters().values() if p.grad is not None]
        return not grads or not bool(found_nonfinite(grads))

    def activation_bytes(self) -> int:
        """Bytes of the VNode outputs kept for backward (in each VNode's precision)."""
        return sum(s.output.numel() * s.output.element_size() for s in self._saved.values())


# -- how gradients meet at VNode boundaries (the PNode stage and `local_step` both follow these) --
def loss_gradient(loss_scale: float, tokens: int, device: torch.device) -> torch.Tensor:
    """The gradient that starts a loss VNode's backward: d(loss_sum * scale / tokens), because the
    step's loss is the mean over all its tokens, whatever the micro-batch split."""
    return torch.tensor(loss_scale / tokens, device=device)


def summed_in_order(parts: Sequence[torch.Tensor], dtype: torch.dtype) -> torch.Tensor | None:
    """The consumers' gradients of one output, summed in the graph's consumer order (the same on
    every placement, so the same bits), in the output's dtype (a gradient that came back over a
    narrower wire is widened first); None when nothing reads the output."""
    if not parts:
        return None
    total = parts[0].to(dtype)
    for g in parts[1:]:
        total = total + g.to(dtype)
    return total


def gradients_by_input(inputs: Sequence[str], grads: Sequence[torch.Tensor | None]) -> dict[str, torch.Tensor]:
    """A VNode's input gradients by producer (one producer read twice gets the sum); no dataset inputs."""
    out: dict[str, torch.Tensor] = {}
    for name, g in zip(inputs, grads):
        if g is not None:
            out[name] = g if name not in out else out[name] + g
    return out
