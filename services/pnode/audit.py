"""What a stage commits to in a verified session, and what it keeps so that its results can be checked.

The audit watches every VNode result as the runtime hands it on (`RuntimeObserver`): during a
training step it records the digest of each forward output, of each gradient handed back to a
producer and of each parameter-gradient contribution (the ledger, sent with the `RunStep` reply),
and holds on to the inputs each VNode read and the gradients its consumers handed back. When
`ApplyStep` names the items picked for a check, their material (with a copy of the parameters
as they were before the update) moves to `kept` until the orchestrator releases it; the rest of
the step's record is dropped. A PNode with a fault (`--fault corrupt:P`) corrupts its results
here, before they are committed to, as broken hardware would.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import torch

from computeall.network import Graph
from computeall.network.ops import DATA_INPUTS, OPS
from computeall.protocol.verification import ItemDigests, KeepMaterial
from computeall.tensorcore.digest import tensor_digest, tensors_digest
from computeall.tensorcore.recompute import check_parameters
from computeall.tensorcore.vnode_runtime import VNodeRuntime, gradients_by_input
from computeall.tensorcore.wire_formats import WireFormat

from .faults import Faults

Item = tuple[int, str]  # (micro, vnode)


def as_read(wire: dict[str, WireFormat], graph: Graph, vid: str, t: torch.Tensor) -> torch.Tensor:
    """`vid`'s output (or a gradient of it) as its reader gets it: through `vid`'s wire format (the
    same tensor when that is fp32); a loss is read by nobody."""
    return t if OPS[graph.vnodes[vid].op].is_loss else wire[vid].encode(t).decode()


@dataclass
class Material:
    """What a checker needs besides the network and the dataset to recompute one item."""

    params: dict[str, torch.Tensor]
    inputs: dict[int, torch.Tensor]  # input slot -> the tensor the VNode read (dataset inputs: fetched by the checker)
    grads: dict[str, torch.Tensor] = field(default_factory=dict)  # consumer -> the gradient it handed back

    def tensors(self) -> list[torch.Tensor]:
        return [*self.params.values(), *self.inputs.values(), *self.grads.values()]


class StepAudit:
    def __init__(self, pnode: str, graph: Graph, runtime: VNodeRuntime, wire: dict[str, WireFormat], record: bool,
                 faults: Faults | None) -> None:
        self.pnode = pnode
        self.graph = graph
        self.runtime = runtime
        self.wire = wire  # each VNode's wire format: a digest is of the tensor its consumers (or it) read
        self.record = record
        self.faults = faults
        self.step: int | None = None  # the training step being run; None outside one (validation)
        self._digests: dict[Item, dict] = {}
        self._inputs: dict[Item, dict[int, torch.Tensor]] = {}
        self._grads: dict[Item, dict[str, torch.Tensor]] = {}
        self.kept: dict[str, Material] = {}

    # -- a training step ------------------------------------------------------------------
    def begin(self, step: int) -> None:
        self.forget_step()
        self.step = step

    def end(self) -> list[ItemDigests] | None:
        """The ledger of the step just run (None when not verifying)."""
        self.step = None
        if not self.record:
            return None
        order = {v: i for i, v in enumerate(self.graph.order)}
        return [ItemDigests(micro=m, vnode=v, **d) for (m, v), d in sorted(self._digests.items(), key=lambda kv: (kv[0][0], order[kv[0][1]]))]

    def forget_step(self) -> None:
        self._digests.clear()
        self._inputs.clear()
        self._grads.clear()

    # -- RuntimeObserver (on the compute thread) ------------------------------------------
    def forward_done(self, vid: str, micro: int, inputs: list[torch.Tensor], output: torch.Tensor) -> torch.Tensor:
        if self.step is None:
            return output
        if self.faults:
            output = self.faults.apply(output, self.step, micro, vid, "output")
        if self.record:
            names = self.graph.vnodes[vid].inputs
            self._inputs[(micro, vid)] = {i: x for i, (n, x) in enumerate(zip(names, inputs)) if n not in DATA_INPUTS}
            self._digests[(micro, vid)] = {"output": tensor_digest(as_read(self.wire, self.graph, vid, output))}
        return output

    def backward_done(self, vid: str, micro: int, input_grads: list[torch.Tensor | None],
                      param_grads: Sequence[torch.Tensor | None]) -> list[torch.Tensor | None]:
        if self.step is None:
            return input_grads
        if self.faults:
            first = next((i for i, g in enumerate(input_grads) if g is not None), None)
            if first is not None:
                input_grads = list(input_grads)
                input_grads[first] = self.faults.apply(input_grads[first], self.step, micro, vid, "gradient")
        if self.record:
            handed_back = gradients_by_input(self.graph.vnodes[vid].inputs, input_grads)  # as the stage sends them
            once: dict[int, str] = {}  # an add hands the very same tensor to both producers: hash it once
            self._digests[(micro, vid)].update(
                input_grads={name: once.get(id(g)) or once.setdefault(id(g), tensor_digest(as_read(self.wire, self.graph, name, g)))
                             for name, g in handed_back.items()},
                param_grads=tensors_digest(param_grads),
            )
        return input_grads

    # -- from the stage --------------------------------------------------------------------
    def grads_received(self, micro: int, vid: str, parts: dict[str, torch.Tensor]) -> None:
        """The gradients of `vid`'s output its consumers handed back (before they are summed)."""
        if self.record and self.step is not None:
            self._grads[(micro, vid)] = dict(parts)

    def keep(self, items: list[KeepMaterial]) -> None:
        """Before the update: keep the material of the items picked for a check; forget the rest."""
        copies: dict[str, dict[str, torch.Tensor]] = {}  # one copy of a VNode's parameters for all its items
        for item in items:
            key = (item.micro, item.vnode)
            if key not in self._inputs:
                continue  # not hosted here, or not run: the check will say the material is missing
            if item.vnode not in copies:
                copies[item.vnode] = {n: p.detach().clone() for n, p in check_parameters(self.runtime.modules[item.vnode]).items()}
            grads = self._grads.get(key, {}) if item.backward else {}
            self.kept[item.check_id] = Material(copies[item.vnode], self._inputs[key], grads)
        self.forget_step()

    def release(self, check_ids: list[str]) -> None:
        for check_id in check_ids:
            self.kept.pop(check_id, None)

    def drop(self) -> None:
        """After an abort or a rollback: nothing recorded or kept is wanted any more."""
        self.step = None
        self.forget_step()
        self.kept.clear()

    def nbytes(self) -> int:
        """Bytes held for checks, each tensor once (items of a VNode share its parameters, and inputs can be shared)."""
        held = {id(t): t for m in self.kept.values() for t in m.tensors()}
        return sum(t.numel() * t.element_size() for t in held.values())
