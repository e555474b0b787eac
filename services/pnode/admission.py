"""Which tensor frames a stage accepts, from whom, and how large: its plan's routes, checked for
every frame on the PNode's wire thread before a byte of the tensor is kept.

Who sent a frame is the last token of its subject (`subjects.tensor_sender`): nats-server lets a
PNode publish tensors only as itself. The plan says who produces each tensor this PNode reads:

- an activation of VNode `src`: the PNode hosting `src` in this replica, when a VNode here reads it;
- a gradient of a local VNode's output: the PNode hosting the consumer that computed it;
- a partial sum of a local VNode's gradients: the PNode hosting that VNode in the partner replica
  of one level of the butterfly, over exactly the micro-batches that partner sums; diloco's outer
  sync of its pseudo-gradients likewise, for a step up to `overlap_steps` back (it travels while
  they run), as large as its wire makes it (`SparseCompression.layout` for sparse messages);
- the gradient norms of a step (replicas that decide their own inner steps): another PNode of this
  replica, named by its first VNode, one float64 for each VNode it hosts;
- a spot check's material: a PNode hosting the checked VNode in some replica (the checker then
  takes only the host the orchestrator named, `checks.CheckInbox`).

A training tensor is for the step this stage runs or the next one (a producer may start step k+1
before this PNode has its `RunStep`), a validation's for the step after the last one trained, and
for a micro-batch that pass runs. A frame of an earlier step from the right sender is late (an
aborted try's), not hostile. No tensor may claim more bytes than its route carries at most: a
VNode's output for one micro-batch, or its parameters, at 4 bytes an element. Each check is a
dict lookup, nothing next to hashing the frame.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass

from computeall.network import Graph
from computeall.network.ops import DATA_INPUTS
from computeall.protocol.pnode_api import LoadPlan
from computeall.protocol.replica_sync import ReplicaSync
from computeall.protocol.verification import CheckItem
from computeall.protocol.wire import TensorHeader, WireError

from .routing import CheckPartRoute, TensorRoute, first_vnodes

MAX_ELEMENT_BYTES = 4  # fp32: the widest a tensor travels in (a wire format never widens)
MAX_PARAM_TENSORS = 16  # parameter tensors of one VNode, at most, in a check's material
NORM_BYTES = 8  # a VNode's squared gradient norm: a float64

Route = TensorRoute | CheckPartRoute


class LateFrame(WireError):
    """A frame of a pass already over, from the PNode that was to send it: dropped without alarm."""


@dataclass(frozen=True)
class Expected:
    """What the plan says of one tensor: who may send it and how large it may be."""

    what: str  # the tensor, as a rejection names it
    senders: Collection[str]
    max_bytes: int


def _names(senders: Collection[str]) -> str:
    return " or ".join(sorted(senders)) or "nobody"


class Admission:
    def __init__(self, plan: LoadPlan, graph: Graph, pnode: str) -> None:
        assignment = plan.assignment
        assignments = plan.replicas.assignments if plan.replicas else [assignment]
        local = {v for v in graph.order if assignment[v] == pnode}
        tokens = plan.batches.micro_batch_size * plan.batches.context
        self.graph = graph
        self.session = plan.session_id
        # a VNode's output for one micro-batch (its gradient is as large); its parameters, tied ones included
        self._output_bytes = {v: tokens * (graph.out_features[v] or 1) * MAX_ELEMENT_BYTES for v in graph.order}
        tied = {v: group for group in graph.tie_groups() for v in group}
        self._weight_bytes = {v: sum(graph.param_count(u) for u in tied.get(v, {v})) * MAX_ELEMENT_BYTES
                              for v in graph.order}
        self._producers = {src: assignment[src] for v in local for src in graph.vnodes[v].inputs
                           if src not in DATA_INPUTS and src not in local}
        self._consumers = {(v, c): assignment[c] for v in local for c in graph.consumers(v) if c not in local}
        self._partners = {(v, *exchange.theirs): assignments[exchange.partner][v]
                          for exchange in plan.exchanges for v in local}
        self._sync = plan.replicas.sync if plan.replicas else ReplicaSync()
        # the replica's other PNodes, by their first VNode, and how many VNodes each hosts (a value each)
        firsts = first_vnodes(assignment, graph.order) if self._sync.replicas_decide else {}
        hosted = {p: sum(1 for v in graph.order if assignment[v] == p) for p in firsts}
        self._norm_senders = {vid: (p, hosted[p]) for p, vid in firsts.items() if p != pnode}
        self._block = len(plan.block)
        self._hosts = {v: frozenset(a[v] for a in assignments) for v in graph.order} if plan.verify else {}
        self._micros = {"train": plan.block, "val": range(plan.batches.validation_batches)}
        self._check_micros = range(plan.micro_batches)
        self.next_step = 0  # the training step this stage runs next
        self._kinds: dict[str, Callable[[TensorHeader], tuple[Route, Expected]]] = {
            "act": self._activation, "grad": self._gradient, "sum": self._sum, "outer": self._outer,
            "norms": self._norms, "check": self._check_part,
        }

    # -- where the stage is --------------------------------------------------------------------
    def running(self, step: int) -> None:
        """`RunStep(step)` arrived: its tensors and the next step's are expected."""
        self.next_step = step + 1

    def restored(self, step: int) -> None:
        """The state is a checkpoint's of `step`: that step runs next."""
        self.next_step = step

    def validating(self, batches: int) -> None:
        """A `RunValidation` of `batches` micro-batches: refused when the plan announced fewer, whose
        frames for the rest would be refused too."""
        allowed = self._micros["val"].stop
        if batches > allowed:
            raise ValueError(f"a validation of {batches} micro-batches, but the plan of session {self.session} "
                             f"announced {allowed} (BatchSource.validation_batches); send a plan with as many")

    # -- a frame -------------------------------------------------------------------------------
    def admit(self, sender: str, header: TensorHeader) -> Route:
        """The route of a frame `sender` may send here; `WireError` (`LateFrame`) saying why not."""
        kind = header.meta.get("kind")
        expect = self._kinds.get(kind) if isinstance(kind, str) else None
        if expect is None:
            raise WireError(f"tensor {header.key!r} from {sender}: kind {kind!r} is none of {', '.join(self._kinds)}")
        route, expected = expect(header)
        if sender not in expected.senders:
            raise WireError(f"{expected.what} comes from {_names(expected.senders)}, not from {sender}")
        if isinstance(route, TensorRoute):
            self._check_pass(route, expected)
        if header.key != route.wire_key:
            raise WireError(f"{expected.what} travels under key {route.wire_key!r}, not {header.key!r}")
        if header.total_bytes > expected.max_bytes:
            raise WireError(f"{expected.what} from {sender} claims {header.total_bytes} bytes; "
                            f"it is {expected.max_bytes} at most")
        return route

    def _check_pass(self, route: TensorRoute, expected: Expected) -> None:
        first, last = (self.next_step - 1, self.next_step) if route.phase == "train" else (self.next_step,) * 2
        if route.kind == "outer":  # it travels while the next steps run
            first -= self._sync.overlap_steps
        if route.step < first:
            raise LateFrame(f"{expected.what} came late: that step is over")
        if route.step > last:
            raise WireError(f"{expected.what} came too early: this PNode expects {route.phase} step {last} at the latest")
        micros = self._micros[route.phase]
        if route.kind not in ("sum", "outer") and route.micro not in micros:
            raise WireError(f"{expected.what} is not for this PNode: its {route.phase} passes run micro-batches "
                            f"{micros.start}..{micros.stop - 1}")

    # -- each kind of tensor: its route and what the plan expects of it --------------------------
    def _activation(self, header: TensorHeader) -> tuple[Route, Expected]:
        route = TensorRoute.from_wire(header.key, header.meta)
        what = f"the output of {route.src} ({route.phase} step {route.step}, micro-batch {route.micro})"
        producer = self._producers.get(route.src)
        if producer is None:
            raise WireError(f"{what} is not read here: no VNode on this PNode takes it from another PNode")
        return route, Expected(what, (producer,), self._output_bytes[route.src])

    def _gradient(self, header: TensorHeader) -> tuple[Route, Expected]:
        route = TensorRoute.from_wire(header.key, header.meta)
        what = (f"the gradient of {route.src}'s output from {route.consumer} "
                f"({route.phase} step {route.step}, micro-batch {route.micro})")
        consumer = self._consumers.get((route.src, route.consumer))
        if consumer is None:
            raise WireError(f"{what} is not expected here: {route.src} is not on this PNode or "
                            f"{route.consumer} does not read it from another PNode")
        return route, Expected(what, (consumer,), self._output_bytes[route.src])

    def _sum(self, header: TensorHeader) -> tuple[Route, Expected]:
        route = TensorRoute.from_wire(header.key, header.meta)
        what = f"the sum of {route.src}'s gradients over micro-batches [{route.micro}, {route.micro_end}) of step {route.step}"
        partner = self._partner(route, what, "sum", exchanged=route.phase == "train")
        return route, Expected(what, (partner,), self._weight_bytes[route.src])

    def _outer(self, header: TensorHeader) -> tuple[Route, Expected]:
        route = TensorRoute.from_wire(header.key, header.meta)
        what = (f"the outer sync of {route.src} from the replicas of micro-batches [{route.micro}, {route.micro_end}) "
                f"after step {route.step}")
        partner = self._partner(route, what, "sync", exchanged=self._sync.mode == "diloco")
        max_bytes = self._weight_bytes[route.src]
        if self._sync.compression is not None:  # the messages of as many replicas as the node covers
            replicas = (route.micro_end - route.micro) // self._block
            max_bytes = replicas * self._sync.compression.layout(max_bytes // MAX_ELEMENT_BYTES).message_bytes
        return route, Expected(what, (partner,), max_bytes)

    def _norms(self, header: TensorHeader) -> tuple[Route, Expected]:
        route = TensorRoute.from_wire(header.key, header.meta)
        what = f"the message of gradient norms of step {route.step} named by {route.src}"
        sender = self._norm_senders.get(route.src)
        if sender is None:
            raise WireError(f"{what} is not expected here: no other PNode of this replica that decides its own "
                            f"steps hosts {route.src} first")
        pnode, values = sender
        return route, Expected(what, (pnode,), values * NORM_BYTES)

    def _partner(self, route: TensorRoute, what: str, exchange: str, exchanged: bool) -> str:
        """The PNode of the partner replica that sends this PNode `route`'s partial sum, where this
        kind of `exchange` runs at all (`exchanged`)."""
        partner = self._partners.get((route.src, route.micro, route.micro_end)) if exchanged else None
        if partner is None:
            raise WireError(f"{what} is not expected here: no replica sends this PNode that {exchange}")
        return partner

    def _check_part(self, header: TensorHeader) -> tuple[Route, Expected]:
        route = CheckPartRoute.from_wire(header.key, header.meta)
        what = f"material {route.part!r} of check {route.check}"
        if not self._hosts:
            raise WireError(f"{what}: session {self.session} is not verified, so this PNode runs no checks")
        try:
            _, micro, vnode = CheckItem.parse_check_id(route.check)
        except ValueError:
            raise WireError(f"{what}: {route.check!r} is not a check id (step/micro/vnode)") from None
        if vnode not in self._hosts or micro not in self._check_micros:
            raise WireError(f"{what}: the session has no VNode {vnode!r} or no micro-batch {micro}")
        spec = self.graph.vnodes[vnode]
        if route.parts > MAX_PARAM_TENSORS + len(spec.inputs) + len(self.graph.consumers(vnode)):
            raise WireError(f"{what}: a check of {vnode} has fewer than {route.parts} parts")
        return route, Expected(what, self._hosts[vnode], self._part_bytes(what, vnode, route.part))

    def _part_bytes(self, what: str, vnode: str, part: str) -> int:
        """How large one part of a check's material may be: `param.<name>`, `input.<slot>`, `grad.<consumer>`."""
        kind, _, name = part.partition(".")
        inputs = self.graph.vnodes[vnode].inputs
        if kind == "param" and name:
            return self._weight_bytes[vnode]
        if kind == "input" and name.isdigit() and int(name) < len(inputs) and inputs[int(name)] not in DATA_INPUTS:
            return self._output_bytes[inputs[int(name)]]
        if kind == "grad" and name in self.graph.consumers(vnode):
            return self._output_bytes[vnode]
        raise WireError(f"{what}: {vnode} has no such part (param.<name>, input.<slot> of a VNode input, "
                        f"grad.<consumer>)")
