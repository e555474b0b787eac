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

import math
from dataclasses import dataclass
from functools import partial
from typing import Callable, Protocol, Sequence

import torch
from torch import nn

from computeall.network import Graph
from computeall.network.ops import DATA_INPUTS

from computeall.kernels import found_nonfinite

from computeall.protocol.config import DecayGroup

from .grad_norms import vnode_grad_sq_norms
from .micro_gradients import MicroGradients
from .ops import build_vnode
from .param_groups import decay_groups
from .precision import cast_input, dtype_of


@dataclass
class _Saved:
    args: list[torch.Tensor]  # the inputs as the VNode read them: leaves, and token ids
    leaves: list[torch.Tensor | None]  # None for dataset inputs (token ids)
    output: torch.Tensor | None  # with its autograd graph; None: the VNode recomputes it in backward


class RuntimeObserver(Protocol):
    """Sees each VNode result as it is handed on, and hands on what it returns (spot-check ledgers,
    fault injection: `computeall.pnode.audit`). It must not change a tensor in place."""

    def forward_done(self, vid: str, micro: int, inputs: list[torch.Tensor], output: torch.Tensor) -> torch.Tensor: ...

    def backward_done(self, vid: str, micro: int, input_grads: list[torch.Tensor | None],
                      param_grads: Sequence[torch.Tensor | None]) -> list[torch.Tensor | None]: ...


class VNodeRuntime:
    """The VNodes one PNode hosts, for one session."""

    def __init__(self, graph: Graph, vnode_ids: list[str], session_seed: int, device: torch.device,
                 init: bool = True) -> None:
        """`init=False`: the parameters are not initialised, for a caller that loads every one (`build_vnode`)."""
        self.graph = graph
        self.device = device
        self.order = [v for v in graph.order if v in set(vnode_ids)]
        self.dtypes = {v: dtype_of(graph.vnodes[v].precision) for v in self.order}
        # what each output is in, so the gradients handed back to it are summed in it too
        self.output_dtypes = {v: output_dtype(graph, v) for v in self.order}
        self.modules: dict[str, nn.Module] = {}
        # tied VNodes point at their partner, so build the partners (embeddings) first
        for vid in sorted(self.order, key=lambda v: graph.vnodes[v].tie is not None):
            self.modules[vid] = build_vnode(graph.vnodes[vid], session_seed, device, tied=self.modules, init=init)
        self._saved: dict[tuple[int, str], _Saved] = {}
        params = self.parameters()
        self._param_names = {id(p): name for name, p in params.items()}
        self.gradients = MicroGradients(params, self.owners())
        self.observer: RuntimeObserver | None = None
        # (micro, owner VNode) -> the tied weight's parts its borrowers left for the owner's backward
        self._tied_later: dict[tuple[int, str], list[tuple[str, Callable[[], torch.Tensor]]]] = {}

    def defer_tied_gradients(self) -> None:
        """VNodes that borrow a tied weight and can give its gradient apart (`LMHeadShard`) leave it for
        the owner's backward of the same micro-batch: the bits are the same; what changes is that no
        dense part of the weight's gradient waits while the micro-batch's backward crosses the other
        stages (on a PNode hosting both ends of the pipeline, one per micro-batch in flight). Not with
        an observer, which is handed each VNode's parameter gradients at its backward."""
        if self.observer is not None:
            return
        for module in self.modules.values():
            if hasattr(module, "weight_grad"):
                module.defer_weight_grad = True

    def vnode_parameters(self) -> dict[str, dict[str, nn.Parameter]]:
        """Each hosted VNode's own parameters by name, in graph order (a tied weight under its owner)."""
        return {vid: dict(self.modules[vid].named_parameters()) for vid in self.order}

    def parameters(self) -> dict[str, nn.Parameter]:
        """Every parameter once, named `<vnode>.<param>` (a tied weight under its owner)."""
        return {f"{vid}.{name}": p for vid, params in self.vnode_parameters().items() for name, p in params.items()}

    def owners(self) -> dict[str, str]:
        """{`<vnode>.<param>`: its VNode}, for every parameter of `parameters()`."""
        return {f"{vid}.{name}": vid for vid, params in self.vnode_parameters().items() for name in params}

    def decay_groups(self) -> dict[str, DecayGroup]:
        """Every parameter's weight-decay group, named as in `parameters()`."""
        return decay_groups(self.graph, self.vnode_parameters())

    def forward(self, vid: str, micro: int, inputs: list[torch.Tensor]) -> torch.Tensor:
        """Run one VNode; keep what its backward needs under (micro, vid): its autograd graph, or
        only its inputs when it recomputes (`recompute: true`)."""
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
        # with grad even when recomputing: the very code path of the backward's second run, so the two
        # outputs are the same bits (a kernel may take another path without grad)
        out = self._run(vid, args)
        if spec.recompute and not self.graph.op(vid).backward_reads_inputs:
            # its gradients do not depend on the input values: run again on zeros of their shape
            leaves = [None if leaf is None else _stand_in(leaf) for leaf in leaves]
            args = [a if leaf is None else leaf for a, leaf in zip(args, leaves)]
        self._saved[(micro, vid)] = _Saved(args, leaves, None if spec.recompute else out)
        out = out.detach()
        return out if self.observer is None else self.observer.forward_done(vid, micro, inputs, out)

    def start_step(self, block: range, micro_batches: int) -> None:
        """Gradients from zero for a step of `micro_batches`, of which this runtime runs `block`."""
        self._tied_later.clear()
        self.gradients.start(block, micro_batches)

    def _run(self, vid: str, args: list[torch.Tensor]) -> torch.Tensor:
        with torch.enable_grad():
            return self.modules[vid](*(cast_input(a, self.dtypes[vid]) for a in args))

    def backward(self, vid: str, micro: int, grad_output: torch.Tensor) -> list[torch.Tensor | None]:
        """Backward of one VNode; adds its parameters' gradients to the step's (`MicroGradients`),
        returns its inputs' gradients."""
        saved = self._saved.pop((micro, vid))
        output = saved.output if saved.output is not None else self._run(vid, saved.args)  # recompute
        leaves = [leaf for leaf in saved.leaves if leaf is not None]
        module = self.modules[vid]
        params = list(module.parameters())
        borrowed = list(getattr(module, "tied_weight", []))
        grad_output = grad_output.to(device=output.device, dtype=output.dtype)
        if getattr(module, "defer_weight_grad", False):
            for p in borrowed:
                name = self._param_names[id(p)]
                later = partial(module.weight_grad, *saved.args, output.detach(), grad_output)
                self._tied_later.setdefault((micro, self.gradients.owner_of[name]), []).append((name, later))
            borrowed = []
        # the parts its borrowers left, before its own (the order they would have come in), and before its
        # own are computed: one dense gradient of the weight at a time
        self._add_tied_later(micro, vid)
        grads = torch.autograd.grad(output, leaves + params + borrowed, grad_outputs=grad_output, allow_unused=True)
        for p, g in zip(params, grads[len(leaves):]):
            if g is not None:
                self.gradients.add(micro, self._param_names[id(p)], g)
        for p, g in zip(borrowed, grads[len(leaves) + len(params):]):
            if g is not None:  # the owner's weight: its part of this micro-batch's gradient
                self.gradients.add(micro, self._param_names[id(p)], g)
        self.gradients.close(micro, vid)
        it = iter(grads[: len(leaves)])
        input_grads = [None if leaf is None else next(it) for leaf in saved.leaves]
        if self.observer is None:
            return input_grads
        return self.observer.backward_done(vid, micro, input_grads, grads[len(leaves):])

    def _add_tied_later(self, micro: int, owner: str) -> None:
        for name, later in self._tied_later.pop((micro, owner), []):
            self.gradients.add(micro, name, later())

    def finish_backward(self) -> None:
        """Once a step's backwards are all done: every `p.grad` holds its sum over this runtime's block
        (`MicroGradients.finish` folds what no backward closed)."""
        for micro, owner in sorted(self._tied_later):
            self._add_tied_later(micro, owner)
        self.gradients.finish()

    def drop_one(self, micro: int, vid: str) -> None:
        self._saved.pop((micro, vid), None)

    def drop(self, micro: int | None = None) -> None:
        """Forget saved activations and deferred tied parts (of one micro-batch, or all): after an abort."""
        for held in (self._saved, self._tied_later):
            for key in [k for k in held if micro is None or k[0] == micro]:
                del held[key]

    def zero_grad(self) -> None:
        self._tied_later.clear()
        self.gradients.start(range(0), 0)

    def grads_finite(self) -> bool:
        """No inf or nan in any gradient held here (one device reduction, one host read)."""
        grads = [p.grad for p in self.parameters().values() if p.grad is not None]
        return not grads or not bool(found_nonfinite(grads))

    def grad_sq_norms(self, loss_scale: float = 1.0) -> dict[str, float] | None:
        """Each hosted VNode's squared gradient norm, unscaled (`vnode_grad_sq_norms`), or None when
        a gradient here is not finite (or so large that its norm is not): the step overflowed. One
        pass over the gradients does both: an inf or nan anywhere makes its norm inf or nan."""
        norms = vnode_grad_sq_norms(self.vnode_parameters(), loss_scale)
        return norms if all(math.isfinite(v) for v in norms.values()) else None

    def activation_bytes_by_vnode(self) -> dict[str, int]:
        """Bytes kept for backward, by hosted VNode: the outputs of VNodes that keep their graph, the inputs
        of those that recompute (in each VNode's precision). A tensor kept by several counts once, for the
        VNode that keeps it for the earliest micro-batch, the first in graph order."""
        kept: dict[int, tuple[str, int]] = {}
        saved = list(self._saved.items())  # telemetry reads this while the compute thread works
        position = {vid: i for i, vid in enumerate(self.order)}
        for (_, vid), s in sorted(saved, key=lambda item: (item[0][0], position[item[0][1]])):
            for t in [s.output] if s.output is not None else s.args:
                storage = t.untyped_storage()  # a leaf shares its producer's; a stand-in has one element
                kept.setdefault(storage.data_ptr(), (vid, storage.nbytes()))
        out = dict.fromkeys(self.order, 0)
        for vid, nbytes in kept.values():
            out[vid] += nbytes
        return out

    def activation_bytes(self) -> int:
        """All the bytes kept for backward (`activation_bytes_by_vnode`)."""
        return sum(self.activation_bytes_by_vnode().values())


def _stand_in(leaf: torch.Tensor) -> torch.Tensor:
    """A leaf of `leaf`'s shape and dtype that holds one element (zero, broadcast)."""
    return torch.zeros((), dtype=leaf.dtype, device=leaf.device).expand(leaf.shape).requires_grad_(True)


# -- how gradients meet at VNode boundaries (the PNode stage and `local_step` both follow these) --
def output_dtype(graph: Graph, vid: str) -> torch.dtype:
    """The dtype of a VNode's output, in which the gradients handed back to it are summed: its precision's,
    or fp32 for an op whose output is fp32 whatever its precision (`OpSpec.fp32_output`)."""
    return torch.float32 if graph.op(vid).fp32_output else dtype_of(graph.vnodes[vid].precision)


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
