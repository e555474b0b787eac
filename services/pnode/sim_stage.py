"""One session's part of the network on a simulated PNode: the real stage's data flow, modelled time.

Work items run in one fixed order: every micro-batch's forward (micro-batches in order, VNodes in
topological order), then every backward (micro-batches in order, VNodes reversed). Each item
only waits on items earlier in that order on any PNode, so no placement deadlocks. An item waits
for its inputs from other PNodes exactly as the real stage does (placeholder frames on the real
tensor subjects and routes), sleeps its modelled compute time, and sends its outputs on. A PNode
computes one item at a time, whichever session's stage it belongs to (`machine`), as the cores of
a real one do: sessions that share a PNode share its time.
"""

from __future__ import annotations

import asyncio
import time
from typing import Awaitable, Callable

from computeall.network import Graph, NetworkSpec
from computeall.network.ops import DATA_INPUTS
from computeall.protocol.pnode_api import ApplyStep, LoadPlan, PNodeReply, RunStep, RunValidation

from . import sim_model
from .admission import Admission
from .member import InputsNeverCame, PassSuperseded
from .routing import ActivationKey, GradientKey, PassId, TensorRoute

# (pnode to send to, the tensor's real byte count, its route) -> sent
SendPlaceholder = Callable[[str, int, TensorRoute], Awaitable[None]]


class SimulatedStage:
    def __init__(self, plan: LoadPlan, pnode: str, flops_per_s: float, send: SendPlaceholder,
                 machine: asyncio.Lock | None = None) -> None:
        self.plan = plan
        self.machine = machine or asyncio.Lock()  # the PNode's compute, shared by its stages (a Lock is FIFO)
        self.pnode = pnode
        self.send = send
        self.graph = Graph(NetworkSpec.model_validate(plan.network))
        self.local = [v for v in self.graph.order if plan.assignment[v] == pnode]
        self.costs = sim_model.vnode_costs(self.graph, plan, self.local, flops_per_s)
        self.state = {v: sim_model.initial_state(plan.seed, v) for v in self.local}
        self.inbox: set[ActivationKey | GradientKey] = set()
        self.arrived = asyncio.Event()
        self.current = PassId("train", -1)
        self.has_loss = any(self.graph.op(v).is_loss for v in self.local)
        self.admission = Admission(plan, self.graph, pnode)

    def abort(self) -> None:
        self.current = PassId("aborted", -1)
        self.arrived.set()

    def receive(self, route: TensorRoute) -> None:
        if route.phase == self.current.phase and route.step < self.current.step:
            return  # from an aborted or finished pass
        self.inbox.add(route.inbox_key)
        self.arrived.set()

    # -- passes ----------------------------------------------------------------
    async def run_step(self, request: RunStep, deadline_s: float) -> PNodeReply:
        self.admission.running(request.step)
        return await self._run("train", request.step, self.plan.micro_batches, True, deadline_s)

    async def run_validation(self, request: RunValidation, deadline_s: float) -> PNodeReply:
        self.admission.validating(request.batches)
        return await self._run("val", request.step, request.batches, False, deadline_s)

    def apply(self, request: ApplyStep) -> PNodeReply:
        if not request.skip:
            self.state = {v: sim_model.applied(s, request.step, request.lr) for v, s in self.state.items()}
        return PNodeReply(ok=True, pnode=self.pnode, step=request.step)

    async def _run(self, phase: str, step: int, micro_batches: int, backward: bool, deadline_s: float) -> PNodeReply:
        self.current = PassId(phase, step)
        self.inbox = {k for k in self.inbox if not (k.phase == phase and k.step < step)}
        give_up = time.monotonic() + deadline_s
        tokens_per_micro = self.plan.batches.micro_batch_size * self.plan.batches.context
        per_token = sim_model.loss_per_token(self.plan.seed, phase, step, self.graph.spec.vocab_size)
        loss_sum, tokens, compute_s, wait_s = 0.0, 0, 0.0, 0.0
        micro_losses: dict[int, float] = {}  # the orchestrator adds the step's loss micro-batch by micro-batch
        for m in range(micro_batches):
            for vid in self.local:
                needed = [ActivationKey(phase, step, m, i) for i in self.graph.vnodes[vid].inputs
                          if i not in DATA_INPUTS and i not in self.costs]
                wait_s += await self._wait_for(needed, PassId(phase, step), give_up, deadline_s)
                compute_s += await self._compute(self.costs[vid].forward_s)
                if self.graph.op(vid).is_loss:
                    micro_losses[m] = per_token * tokens_per_micro
                    loss_sum += micro_losses[m]
                    tokens += tokens_per_micro
                    continue
                route = TensorRoute.activation(self.plan.session_id, phase, step, m, src=vid)
                for pnode in sorted({self.plan.assignment[c] for c in self.graph.consumers(vid)} - {self.pnode}):
                    await self.send(pnode, self.costs[vid].output_bytes, route)
        for m in range(micro_batches if backward else 0):
            for vid in reversed(self.local):
                if not self.graph.op(vid).is_loss and not self.graph.consumers(vid):
                    continue  # an output nothing reads: nothing flows back
                needed = [GradientKey(phase, step, m, vid, c) for c in self.graph.consumers(vid) if c not in self.costs]
                wait_s += await self._wait_for(needed, PassId(phase, step), give_up, deadline_s)
                compute_s += await self._compute(self.costs[vid].backward_s)
                for name in dict.fromkeys(self.graph.vnodes[vid].inputs):
                    if name in DATA_INPUTS or name in self.costs:
                        continue
                    route = TensorRoute.gradient(self.plan.session_id, phase, step, m, src=name, consumer=vid)
                    await self.send(self.plan.assignment[name], self._output_bytes(name), route)
        return PNodeReply(ok=True, pnode=self.pnode, step=step, loss_sum=loss_sum if self.has_loss else None,
                          micro_losses=micro_losses, tokens=tokens, compute_s=compute_s, wait_s=wait_s)

    def _output_bytes(self, vid: str) -> int:
        """A remote VNode's output for one micro-batch (what its gradient weighs)."""
        return sim_model.vnode_costs(self.graph, self.plan, [vid], 1.0)[vid].output_bytes

    async def _wait_for(self, keys: list, pass_id: PassId, give_up: float, deadline_s: float) -> float:
        t0 = time.monotonic()
        while not all(k in self.inbox for k in keys):
            self.arrived.clear()
            now = time.monotonic()
            if now >= give_up:
                raise InputsNeverCame(f"{pass_id}: inputs {keys} did not arrive within {deadline_s:.1f}s")
            try:
                await asyncio.wait_for(self.arrived.wait(), timeout=min(give_up - now, 1.0))
            except asyncio.TimeoutError:
                pass
            if self.current != pass_id:
                raise PassSuperseded(f"{pass_id} was superseded by {self.current}")
        return time.monotonic() - t0

    async def _compute(self, seconds: float) -> float:
        async with self.machine:
            await asyncio.sleep(seconds)
        return seconds
