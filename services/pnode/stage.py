"""One session's part of the network on this PNode: a step's forwards and backwards, data-driven.

Work items are forwards and backwards of (micro, VNode) pairs. The schedule (`schedule.py`, the
session's "1f1b" or "gpipe") says which item runs next, among those whose inputs are here (from
a local VNode, another PNode, or the dataset). The PNode's compute thread runs items back to back
for as long as one is ready (the event loop steps in only to wait for tensors), and hands what
goes to other PNodes to the outbox (`outbox.py`), which sends on its own task: compute never
waits for a send. Each VNode's items run in micro-batch order and an output's gradients are summed
in consumer order, so gradients accumulate alike on every placement and schedule: 1 PNode or 5
compute the same bits.

With data-parallel replicas the stage runs its replica's block of each step's micro-batches, and
its gradients are summed with the other replicas' before it replies (`replica_sum.py`). Where each
diloco replica decides its own inner steps, the stage tells its replica's other PNodes its
gradients' norms as the pass ends, and its update decides skip and clip from all of them
(`replica_norms.py`).

Every output edge of a VNode carries its wire format (`wire_formats.py`), local or remote: local
consumers read the decoded form, remote ones are sent the encoded form and decode the same bytes.

A pass is a training step (`phase` "train": forward and backward) or a validation (`phase`
"val": forward only, on the validation split). Tensors between PNodes carry the phase and step,
so the two never mix. A RunStep for a step whose pass is still in flight (the orchestrator gave up
on it: its messages were lost with a nats-server) makes that pass give up first; the step then
runs again from the same state (`start_step` drops its gradients so far). Tensors of the abandoned
try that arrive late carry the same bits as the new try's.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from concurrent.futures import Executor
from dataclasses import dataclass, field
from functools import partial
from typing import Callable

import torch

from computeall.network import Graph, NetworkSpec
from computeall.network.in_flight import default_in_flight
from computeall.network.ops import DATA_INPUTS, OPS
from computeall.protocol import clipping
from computeall.protocol.pnode_api import ApplyStep, LoadPlan, PNodeReply, RunStep, RunValidation
from computeall.tensorcore.optimizer import VNodeOptimizer
from computeall.tensorcore.recompute import Recomputer
from computeall.tensorcore.update_norms import measured_update
from computeall.tensorcore.vnode_runtime import VNodeRuntime, gradients_by_input, loss_gradient, summed_in_order
from computeall.tensorcore.wire_formats import Encoded, wire_format

from .admission import Admission
from .audit import StepAudit
from .batches import BatchFeed
from .checks import CheckInbox
from .faults import Faults
from .member import InputsNeverCame, PassSuperseded
from .transport import Link, Outbox
from .replica_norms import ReplicaNorms
from .replica_sum import ReplicaSum
from .routing import ActivationKey, GradientKey, PassId, TensorRoute
from .schedule import PassSchedule, WorkItem, pass_schedule

log = logging.getLogger("computeall.pnode.stage")

# hand a tensor in its wire form to the outbox, for a PNode: safe to call from the compute thread
Send = Callable[[str, Encoded, TensorRoute], object]
Summand = Callable[[str, torch.Tensor], object]  # a VNode's flat gradient is final: safe to call from the compute thread


@dataclass
class _Pass:
    phase: str  # "train" or "val"
    step: int
    micro_batches: int  # of the step: its loss is the mean over all of their tokens
    micros: range  # the micro-batches this stage runs (with replicas, its replica's block)
    feed: BatchFeed
    backward: bool
    schedule: PassSchedule
    batches: dict[int, torch.Tensor] = field(default_factory=dict)
    outputs: dict[tuple[int, str], torch.Tensor] = field(default_factory=dict)  # as local consumers read them
    grads: dict[tuple[int, str], dict[str, torch.Tensor]] = field(default_factory=lambda: defaultdict(dict))
    reads_left: dict[tuple[int, str], int] = field(default_factory=dict)  # local forwards yet to read an input
    loss_sum: float = 0.0
    micro_losses: dict[int, float] = field(default_factory=dict)  # the loss summed per micro-batch
    tokens: int = 0
    compute_s: float = 0.0


class SessionStage:
    def __init__(
        self,
        plan: LoadPlan,
        pnode: str,
        device: torch.device,
        executor: Executor,
        feeds: Callable[[str, int], BatchFeed],
        link: Link,
        faults: Faults | None = None,
    ):
        self.plan = plan
        self.pnode = pnode
        self.executor = executor
        self.outbox = Outbox(link)
        self.graph = Graph(NetworkSpec.model_validate(plan.network))
        self.local = [v for v in self.graph.order if plan.assignment[v] == pnode]
        self.runtime = VNodeRuntime(self.graph, self.local, plan.seed, device)
        self.optimizer = VNodeOptimizer(self.runtime.parameters(), plan.optimizer, self.runtime.decay_groups())
        self.train_feed = feeds(plan.batches.split, plan.micro_batches)
        self.feeds = feeds
        self.inbox: dict[ActivationKey | GradientKey, torch.Tensor] = {}
        self.arrived = asyncio.Event()
        self.current = PassId("train", -1)
        self.running: asyncio.Event | None = None  # set once the pass in flight has ended
        self.loss_scale = 1.0
        self.in_flight = plan.pipeline.in_flight or default_in_flight(self.graph.order, plan.assignment)
        self._consumers = {v: self.graph.consumers(v) for v in self.local}
        self._wire = {v: wire_format(self.graph.wire(v)) for v in self.graph.order}
        # how many local VNodes read each input: a held input is let go once they all have
        self._local_readers: dict[str, int] = defaultdict(int)
        for v in self.local:
            for name in set(self.graph.vnodes[v].inputs):
                self._local_readers[name] += 1
        self.reads_data = any(i in DATA_INPUTS for v in self.local for i in self.graph.vnodes[v].inputs)
        self.has_loss = any(OPS[self.graph.vnodes[v].op].is_loss for v in self.local)
        self.replica_sum = ReplicaSum(plan, self.runtime, self.optimizer, link, self._compute)
        decides = plan.replicas is not None and plan.replicas.sync.replicas_decide
        self.replica_norms = ReplicaNorms(plan, pnode, self.graph.order, link) if decides else None
        self.grad_sq_norms: tuple[int, dict[str, float] | None] = (-1, None)  # (step, its norms) of the last pass
        # spot checks: a ledger of each step and material kept for checks; the checks this PNode runs
        self.audit = StepAudit(pnode, self.graph, self.runtime, self._wire, plan.verify, faults) if plan.verify or faults else None
        self.runtime.observer = self.audit
        self.check_inbox = CheckInbox(Recomputer(self.graph, plan.seed, device)) if plan.verify else None
        self.admission = Admission(plan, self.graph, pnode)  # which frames come in, from whom (the wire thread asks)

    def abort(self) -> None:
        """Make a pass in flight give up at once (its session was reloaded or unloaded)."""
        self.current = PassId("aborted", -1)
        self.arrived.set()
        self.train_feed.forget()
        self.outbox.close()
        self.replica_sum.close()
        if self.replica_norms:
            self.replica_norms.close()
        if self.audit:
            self.audit.drop()

    def rolled_back(self, step: int) -> None:
        """The state went back to the checkpoint of `step`, which runs next: the batches prefetched for
        what were the next steps are not what comes next, and would otherwise stay held until those
        steps come round again."""
        self.admission.restored(step)
        self.train_feed.forget()
        if self.audit:
            self.audit.drop()

    # -- tensors from other PNodes --------------------------------------------
    def receive(self, route: TensorRoute, tensor: torch.Tensor) -> None:
        if route.kind in ("sum", "outer"):  # between replicas
            self.replica_sum.receive(route, tensor)
            return
        if route.kind == "norms":
            if self.replica_norms:
                self.replica_norms.receive(route, tensor)
            return
        if route.phase == self.current.phase and route.step < self.current.step:
            return  # from an aborted or finished pass
        self.inbox[route.inbox_key] = tensor
        self.arrived.set()

    # -- passes ----------------------------------------------------------------
    async def run_step(self, request: RunStep, deadline_s: float) -> PNodeReply:
        if self.running is not None or self.current == PassId("train", request.step):
            self.train_feed.forget()  # run again: what was prefetched meanwhile may be lost with a nats-server
        self.admission.running(request.step)
        await self._supersede()
        self.loss_scale = request.loss_scale
        block = self.plan.block
        self.runtime.start_step(block, self.plan.micro_batches)
        self.replica_sum.begin(request.step, deadline_s)
        if self.audit:
            self.audit.begin(request.step)
        # diloco's replicas each train on their own loss; with summed gradients the loss is the step's
        loss_over = len(block) if self.replica_sum.outer is not None else self.plan.micro_batches
        reply = await self._run(self._pass("train", request.step, loss_over, block, self.train_feed), deadline_s)
        return reply.model_copy(update={"ledger": self.audit.end()}) if self.audit else reply

    async def run_validation(self, request: RunValidation, deadline_s: float) -> PNodeReply:
        self.admission.validating(request.batches)
        await self._supersede()
        feed = self.feeds(self.plan.batches.validation_split, request.batches)
        return await self._run(self._pass("val", request.step, request.batches, range(request.batches), feed), deadline_s)

    async def _supersede(self) -> None:
        """A pass still in flight gives up, and ends, before the next starts: they share the compute
        thread's state."""
        while self.running is not None:  # again if another request started one meanwhile: the last wins
            self.current = PassId("aborted", -1)
            self.arrived.set()
            self.outbox.clear()
            self.replica_sum.abort()
            await self.running.wait()

    def _pass(self, phase: str, step: int, micro_batches: int, micros: range, feed: BatchFeed) -> _Pass:
        backward = phase == "train"
        schedule = pass_schedule(self.plan.pipeline.schedule, self.local, len(micros), backward, self.in_flight,
                                 first=micros.start)
        return _Pass(phase, step, micro_batches, micros, feed, backward, schedule)

    async def apply(self, request: ApplyStep, deadline_s: float) -> PNodeReply:
        skip, clip_factor = request.skip, request.clip_factor
        if request.replica_max_norm is not None:
            clip = await self._replica_clip(request.step, request.replica_max_norm, deadline_s)
            skip, clip_factor = clip.skip, clip.factor

        def work() -> tuple[dict[str, float], dict[str, float]] | None:
            if self.audit:  # before the update: a check recomputes with the parameters the step used
                self.audit.keep(request.keep)
                self.audit.release(request.release)
            measured = None
            if skip:
                pass  # every PNode of the replica (without replica decisions: every PNode) drops the step's gradients
            elif request.measure_update:
                measured = measured_update(self.runtime.owners(), partial(
                    self.optimizer.measured_step, request.lr, self.loss_scale, clip_factor))
            else:
                self.optimizer.step(request.lr, self.loss_scale, clip_factor)
            self.runtime.zero_grad()
            return measured

        measured = await self._compute(work)
        sent = await self.replica_sum.outer_step(request.step, deadline_s)
        updates, weights = measured or (None, None)
        return PNodeReply(ok=True, pnode=self.pnode, step=request.step, reduce_bytes=sent,
                          update_sq_norms=updates, weight_sq_norms=weights)

    async def _replica_clip(self, step: int, max_norm: float, deadline_s: float) -> clipping.Clip:
        """The skip and clip of `step` this replica decides: from its PNodes' norms, this one's included."""
        ran, own = self.grad_sq_norms
        if ran != step:
            raise ValueError(f"an update of step {step} decided here, but this PNode's last pass was of step {ran}")
        if self.replica_norms is None:
            raise ValueError(f"session {self.plan.session_id}'s plan does not let its replicas decide their steps "
                             f"(sync.inner_decisions: own); the orchestrator must decide them")
        return clipping.clip(await self.replica_norms.gathered(step, own, deadline_s), max_norm)

    async def _run(self, p: _Pass, deadline_s: float) -> PNodeReply:
        self.running = ended = asyncio.Event()
        try:
            return await self._run_pass(p, deadline_s)
        finally:
            self.running = None
            ended.set()

    async def _run_pass(self, p: _Pass, deadline_s: float) -> PNodeReply:
        self.current = PassId(p.phase, p.step)
        for key in [k for k in self.inbox if k.phase == p.phase and k.step < p.step]:
            del self.inbox[key]
        self.runtime.drop()
        self.outbox.clear()
        fetches = [asyncio.ensure_future(self._fetch(p, m)) for m in p.micros] if self.reads_data else []
        loop = asyncio.get_running_loop()
        send: Send = lambda pnode, encoded, route: loop.call_soon_threadsafe(self.outbox.put, pnode, encoded, route)
        # a VNode whose block's gradient is final starts its sum over the replicas
        summed = self.replica_sum.start
        summand: Summand = lambda vid, flat: loop.call_soon_threadsafe(summed, p.step, vid, flat)
        wait_s = 0.0
        give_up = time.monotonic() + deadline_s
        try:
            while not p.schedule.finished:
                # cleared before the run, so that what arrives while it checks readiness is not missed
                self.arrived.clear()
                if not await self._compute(self._run_ready_items, p, send, summand):
                    wait_s += await self._wait(p, give_up, deadline_s)
            traffic = await self.outbox.flush()
        finally:
            for task in fetches:
                task.cancel()
            if not p.backward:
                self.runtime.drop()
        reduce_bytes, norms = 0, None
        if p.backward:
            await self._compute(self.runtime.finish_backward)
            reduce_bytes = await self.replica_sum.finish()  # every replica holds the summed gradients now
            # for the orchestrator's overflow check and global clipping: None when not finite
            norms = await self._compute(self.runtime.grad_sq_norms, self.loss_scale)
            self.grad_sq_norms = (p.step, norms)
            if self.replica_norms:
                self.replica_norms.share(p.step, norms)
        return PNodeReply(
            ok=True, pnode=self.pnode, step=p.step, loss_sum=p.loss_sum if self.has_loss else None,
            micro_losses=p.micro_losses, tokens=p.tokens, grads_finite=not p.backward or norms is not None,
            grad_sq_norms=norms, compute_s=p.compute_s, wait_s=wait_s,
            send_s=traffic.send_s, sent_bytes=traffic.sent_bytes, reduce_bytes=reduce_bytes,
        )

    def _run_ready_items(self, p: _Pass, send: Send, summand: Summand) -> int:
        """On the compute thread: run work items, in the schedule's order, for as long as one is ready
        (on one PNode, a whole pass), so the event loop is not asked between items. How many ran."""
        ran = 0
        while self.current == PassId(p.phase, p.step):
            item = p.schedule.next(lambda i: self._ready(p, i))
            if item is None:
                break
            t0 = time.monotonic()
            if item.kind == "forward":
                self._forward(p, item.micro, item.vnode, send)
            else:
                self._backward(p, item.micro, item.vnode, send)
                if (flat := self.replica_sum.summand(item.vnode)) is not None:
                    summand(item.vnode, flat)
            p.schedule.done(item)
            p.compute_s += time.monotonic() - t0
            ran += 1
        return ran

    async def _wait(self, p: _Pass, give_up: float, deadline_s: float) -> float:
        t0 = time.monotonic()
        self._check_current(p)
        if t0 >= give_up:
            raise InputsNeverCame(
                f"{p.phase} step {p.step}: inputs of {p.schedule.waiting_for()} did not arrive within {deadline_s:.1f}s"
            )
        try:
            await asyncio.wait_for(self.arrived.wait(), timeout=min(give_up - t0, 1.0))
        except asyncio.TimeoutError:
            pass
        self._check_current(p)
        return time.monotonic() - t0

    def _check_current(self, p: _Pass) -> None:
        if self.current != PassId(p.phase, p.step):
            raise PassSuperseded(f"{p.phase} step {p.step} was superseded by {self.current}")

    # -- readiness ---------------------------------------------------------------
    def _ready(self, p: _Pass, item: WorkItem) -> bool:
        m, vid = item.micro, item.vnode
        if item.kind == "forward":
            return all(self._input_here(p, m, name) for name in self.graph.vnodes[vid].inputs)
        for consumer in self._consumers[vid]:
            if consumer in self.runtime.modules:
                if consumer not in p.grads[(m, vid)]:
                    return False
            elif GradientKey(p.phase, p.step, m, vid, consumer) not in self.inbox:
                return False
        return True

    def _input_here(self, p: _Pass, m: int, name: str) -> bool:
        if name in DATA_INPUTS:
            return m in p.batches
        if name in self.runtime.modules:
            return (m, name) in p.outputs
        return ActivationKey(p.phase, p.step, m, name) in self.inbox

    def _read_input(self, p: _Pass, m: int, name: str) -> torch.Tensor:
        if name == "data.tokens":
            return p.batches[m][:, :-1]
        if name == "data.targets":
            return p.batches[m][:, 1:]
        if name in self.runtime.modules:
            return p.outputs[(m, name)]
        return self.inbox[ActivationKey(p.phase, p.step, m, name)]

    def _let_go(self, p: _Pass, m: int, vid: str) -> None:
        """A forward of (m, vid) read its inputs: drop each once every local reader has (its
        consumers' autograd keeps what backward needs)."""
        for name in set(self.graph.vnodes[vid].inputs):
            if name in DATA_INPUTS:
                continue
            left = p.reads_left.get((m, name), self._local_readers[name]) - 1
            p.reads_left[(m, name)] = left
            if left == 0:
                del p.reads_left[(m, name)]
                if name in self.runtime.modules:
                    p.outputs.pop((m, name), None)
                else:
                    self.inbox.pop(ActivationKey(p.phase, p.step, m, name), None)

    # -- work items ----------------------------------------------------------------
    async def _fetch(self, p: _Pass, m: int) -> None:
        p.batches[m] = await p.feed.get(p.step if p.backward else 0, m, prefetch=p.backward)
        self.arrived.set()

    def _forward(self, p: _Pass, m: int, vid: str, send: Send) -> None:
        spec = self.graph.vnodes[vid]
        out = self.runtime.forward(vid, m, [self._read_input(p, m, name) for name in spec.inputs])
        self._let_go(p, m, vid)
        if not p.backward:
            self.runtime.drop_one(m, vid)
        if OPS[spec.op].is_loss:
            loss = float(out)
            p.loss_sum += loss
            p.micro_losses[m] = p.micro_losses.get(m, 0.0) + loss
            p.tokens += self.plan.batches.micro_batch_size * self.plan.batches.context
            return
        encoded = self._wire[vid].encode(out)
        if self._local_readers.get(vid, 0):
            p.outputs[(m, vid)] = encoded.decode()  # what a local consumer reads
        route = TensorRoute.activation(self.plan.session_id, p.phase, p.step, m, src=vid)
        for pnode in sorted({self.plan.assignment[c] for c in self._consumers[vid]} - {self.pnode}):
            send(pnode, encoded, route)

    def _backward(self, p: _Pass, m: int, vid: str, send: Send) -> None:
        spec = self.graph.vnodes[vid]
        if OPS[spec.op].is_loss:
            # the loss is the mean over every token of the pass, whatever the micro-batch split
            pass_tokens = self.plan.batches.micro_batch_size * self.plan.batches.context * p.micro_batches
            grad_out = loss_gradient(self.loss_scale, pass_tokens, self.runtime.device)
        else:
            parts = p.grads.pop((m, vid), {})
            for consumer in self._consumers[vid]:
                if consumer not in self.runtime.modules:
                    parts[consumer] = self.inbox.pop(GradientKey(p.phase, p.step, m, vid, consumer))
            if self.audit:
                self.audit.grads_received(m, vid, parts)
            grad_out = summed_in_order([parts[c] for c in self._consumers[vid]], self.runtime.output_dtypes[vid])
            if grad_out is None:  # an output nothing reads: nothing flows back
                self.runtime.drop_one(m, vid)
                return
        for name, g in gradients_by_input(spec.inputs, self.runtime.backward(vid, m, grad_out)).items():
            # each gradient travels back on its producer's edge, in the producer's wire format
            encoded = self._wire[name].encode(g)
            if name in self.runtime.modules:
                p.grads[(m, name)][vid] = encoded.decode()
            else:
                send(self.plan.assignment[name], encoded,
                     TensorRoute.gradient(self.plan.session_id, p.phase, p.step, m, src=name, consumer=vid))

    async def _compute(self, fn, *args):
        """Torch work runs on the PNode's one compute thread, so the event loop keeps heartbeating."""
        return await asyncio.get_running_loop().run_in_executor(self.executor, fn, *args)
