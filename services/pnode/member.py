"""What every PNode does on the bus, whatever it computes with: membership, heartbeats, leaving,
control requests and their status telemetry. No torch here: the real PNode (`node.PNode`) and the
simulated one (`simulated.SimulatedPNode`) both build on it, and answer control requests through
one table (`CONTROL`: each request type and the member method that answers it).

A member subscribes to its control and tensor subjects, says what it measured of itself
(`started`, before its first heartbeat), heartbeats every `heartbeat_s` (the orchestrator records
PNodeJoined/PNodeLeft from them), publishes a `MemorySample` every `telemetry_s` and a `StepTiming`
per applied step, and answers each control request with a `PNodeReply`. What a request does and
what a tensor frame means is the subclass's: its methods of `CONTROL`, `on_tensor`, `memory_sample`;
which frames are let in at all is `inbound.Inbound`'s.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
import uuid
from dataclasses import dataclass, field
from typing import Callable

import nats.errors
from nats.aio.client import Client as NATS
from pydantic import TypeAdapter, ValidationError

from computeall.protocol import bus
from computeall.protocol.credentials import Credential
from computeall.protocol.faults import FaultSpec
from computeall.protocol.pnode_api import (
    ApplyStep,
    GenerateSamples,
    LoadCheckpoint,
    LoadPlan,
    PassRequest,
    PNodeReply,
    PNodeRequest,
    Recompute,
    Reset,
    RunStep,
    RunValidation,
    SaveCheckpoint,
    SendCheckMaterial,
    Unload,
    WaitsForPeers,
)
from computeall.protocol.subjects import Subjects
from computeall.protocol.telemetry import HEARTBEAT_INTERVAL_S, Heartbeat, MemorySample, RequestStatus
from computeall.protocol.throughput import Throughput

from .transport import Inbound
from .step_timing import StepClock

log = logging.getLogger("computeall.pnode")

REQUESTS = TypeAdapter(PNodeRequest)
RUNS_KEPT = 8  # the answered RunSteps a session remembers: an update its replica decides follows the one before it


class InputsNeverCame(RuntimeError):
    """A pass gave up waiting for tensors or batches: answered `starved`, so the orchestrator can tell
    this PNode, which answered, from one that never does (`orchestrator/stalls.py`)."""


class PassSuperseded(RuntimeError):
    """A pass gave up because another took its place: its session was reloaded or unloaded, or the
    orchestrator asked for the step again (not to be confused with the event `StepAborted`)."""


@dataclass
class RequestOrder:
    """What one session's control requests tell of one another, in the order they arrived."""

    newest_pass: int = 0  # the arrival number of its latest pass request
    last_apply: tuple[int, bool] = (-1, False)  # (step, applied) of its last ApplyStep answered
    # (step, ok) of its latest RunSteps answered, by arrival number: an update its replica decides
    # follows the pass request that came right before it (`_after_pass`)
    runs_answered: dict[int, tuple[int, bool]] = field(default_factory=dict)
    loads: int = 0  # LoadPlans and LoadCheckpoints taken: its state began again with each


@dataclass(frozen=True)
class Control:
    """How a member answers one type of control request: with which of its methods, and whether that
    method acts on the request's session stage (it is then given the stage; a member without one
    answers `PNodeReply.no_plan`)."""

    method: str
    on_stage: bool = False


# Every control request and the method that answers it, for every kind of member: `BusMember` answers
# what is the same for all, each kind (`node.PNode`, `simulated.SimulatedPNode`) the rest.
CONTROL: dict[type[PNodeRequest], Control] = {
    Reset: Control("reset"),
    LoadPlan: Control("load_plan"),  # each kind: builds its stage and `host`s it
    GenerateSamples: Control("generate_samples"),  # each kind: from a checkpoint, not the stage
    RunStep: Control("run_step", on_stage=True),
    ApplyStep: Control("apply_step", on_stage=True),
    RunValidation: Control("run_validation", on_stage=True),
    SaveCheckpoint: Control("save_checkpoint", on_stage=True),  # each kind
    LoadCheckpoint: Control("load_checkpoint", on_stage=True),  # each kind
    SendCheckMaterial: Control("send_check_material", on_stage=True),  # each kind: a spot check's host
    Recompute: Control("recompute", on_stage=True),  # each kind: a spot check's checker
    Unload: Control("unload", on_stage=True),
}


def wait_deadline(request: WaitsForPeers, step_deadline_s: float) -> float:
    """How long a request may wait for other PNodes: the PNode's own limit, or sooner when the orchestrator says."""
    return min(step_deadline_s, request.give_up_s or step_deadline_s)


class BusMember:
    # what a failed request raises: answered with ok=False and the reason, never a crash
    failures: tuple[type[BaseException], ...] = (KeyError, ValueError, RuntimeError, nats.errors.Error)

    def __init__(self, credential: Credential, memory_bytes: int, device: str, subjects: Subjects,
                 heartbeat_s: float = HEARTBEAT_INTERVAL_S, telemetry_s: float = 2.0,
                 fault: FaultSpec | None = None, step_deadline_s: float = 600.0) -> None:
        self.credential = credential
        self.name = credential.name  # the identity the server knows it by: its subjects carry it
        self.memory_bytes = memory_bytes
        self.device_name = device
        self.subjects = subjects
        self.heartbeat_s = heartbeat_s
        self.telemetry_s = telemetry_s
        self.step_deadline_s = step_deadline_s  # the longest a pass waits for its inputs
        self.stages: dict = {}  # session id -> this member's stage of it
        self.inbound = Inbound(subjects, lambda session: self.stages.get(session))  # tensor frames, checked
        self.pending = 0
        self._arrivals = 0  # control requests received, counted in the order the bus delivered them
        self._order: dict[str, RequestOrder] = {}  # session id -> what its requests tell of one another
        self._answered = asyncio.Condition()
        self.leaving = False
        self.incarnation = uuid.uuid4().hex
        self.leave_grace_s = 60.0
        self._orchestrator_seen = 0.0  # monotonic time of the last orchestrator heartbeat
        self.throughput: Throughput | None = None  # what it measured (or models) of its compute and link
        self.clock = StepClock(self.name)
        self._stop = asyncio.Event()
        self.refused: str | None = None  # why the bus stopped accepting this PNode (revoked, expired)
        self.fault = fault  # a testing option, from the command line only (`protocol/faults.py`)
        self.nc: NATS

    # -- control requests: `CONTROL` -------------------------------------------------------
    async def dispatch(self, request: PNodeRequest) -> PNodeReply:
        control = CONTROL[type(request)]
        answer = getattr(self, control.method)
        if not control.on_stage:
            return await answer(request)
        stage = self.stages.get(request.session_id)
        if stage is None:
            return PNodeReply.no_plan(self.name, request.session_id)
        return await answer(stage, request)

    async def reset(self, request: Reset) -> PNodeReply:
        for session in list(self.stages):
            self._release(session)
        self._order.clear()
        self._wake_waiting_passes()
        log.info("reset: dropped every session (this PNode had been declared lost)")
        return PNodeReply(ok=True, pnode=self.name)

    def _release(self, session_id: str) -> None:
        """Free the session's stage (a pass of it gives up); its request-order record stays."""
        old = self.stages.pop(session_id, None)
        if old is not None:
            old.abort()

    def host(self, session_id: str, stage) -> None:
        """`stage` is the session's from now on; a pass of one it replaces gives up (two LoadPlans at once)."""
        self._release(session_id)
        self.stages[session_id] = stage
        self._order.setdefault(session_id, RequestOrder())

    async def run_step(self, stage, request: RunStep) -> PNodeReply:
        return await stage.run_step(request, wait_deadline(request, self.step_deadline_s))

    async def apply_step(self, stage, request: ApplyStep) -> PNodeReply:
        return await stage.apply(request, wait_deadline(request, self.step_deadline_s))

    async def run_validation(self, stage, request: RunValidation) -> PNodeReply:
        return await stage.run_validation(request, wait_deadline(request, self.step_deadline_s))

    async def unload(self, stage, request: Unload) -> PNodeReply:
        self._release(request.session_id)
        self._order.pop(request.session_id, None)
        self._wake_waiting_passes()
        return PNodeReply(ok=True, pnode=self.name)

    # -- what a kind of PNode decides beside its answers ---------------------------------
    async def on_tensor(self, msg) -> None:
        raise NotImplementedError

    async def memory_sample(self) -> MemorySample:
        raise NotImplementedError

    async def started(self) -> None:
        """Connected and subscribed, before the first heartbeat: measure `throughput` here."""

    def background(self) -> list:
        """Coroutines to run while the member is up, beside its heartbeats and telemetry."""
        return []

    def closed(self) -> None:
        """The connection is gone: release what the member holds (threads, ...)."""

    # -- lifetime -----------------------------------------------------------------------
    async def run(self) -> None:
        self.nc = await bus.connect(self.credential, name=f"pnode-{self.name}", max_reconnect_attempts=-1,
                                    error_cb=self._on_bus_error)
        self.js = self.nc.jetstream()
        await self.nc.subscribe(self.subjects.pnode_ctl(self.name), cb=self._on_ctl)
        await self.nc.subscribe(self.subjects.pnode_tensor_all(self.name), cb=self.on_tensor, pending_bytes_limit=1 << 30)
        await self.nc.subscribe(self.subjects.orchestrator_heartbeat_all(), cb=self._on_orchestrator_heartbeat)
        await self.started()
        # no event of its own: the orchestrator records PNodeJoined/PNodeLeft from the heartbeats
        log.info("pnode %s ready on %s (%s, %.1f GiB; %s)", self.name, ", ".join(self.credential.servers),
                 self.device_name, self.memory_bytes / 2**30, self.throughput)
        tasks = [asyncio.create_task(c) for c in (self._heartbeat(), self._telemetry(), *self.background())]
        await self._stop.wait()
        for t in tasks:
            t.cancel()
        try:
            if self.refused:  # nothing to say goodbye on; closing ends nats-py's reconnect attempts
                await asyncio.wait_for(self.nc.close(), 5)  # bounded: seen to hang flushing a dead TLS link
            else:
                await self.nc.publish(self.subjects.heartbeat(self.name), self.beat(left=True).model_dump_json().encode())
                await self.nc.drain()
        except (nats.errors.Error, TimeoutError):
            pass  # the server went away first
        self.closed()

    async def _on_bus_error(self, exc: Exception) -> None:
        if "authorization violation" in str(exc).lower():  # revoked or expired: no reconnect will help
            if not hasattr(self, "nc"):
                return  # refused at the first connect: `bus.connect` raises `BusConnectError`, which says why
            if self.refused is None:
                self.refused = "the server no longer accepts this PNode's credential (revoked or expired); exiting"
                log.error("%s", self.refused)
            # nats-py's reconnect loop can swallow a cancellation (and so never end): with a bound on
            # the tries it runs out of servers and closes the connection by itself
            self.nc.options.update(allow_reconnect=False, max_reconnect_attempts=1)
            self._stop.set()
        else:
            log.warning("nats: %s", exc)

    def stop(self) -> None:
        """SIGTERM: leave gracefully. Heartbeats say `leaving`; the orchestrator moves this PNode's
        VNodes away at the next step boundary and unloads them; then the process exits."""
        if self.leaving:
            self._stop.set()  # a second signal: exit now
            return
        self.leaving = True
        asyncio.ensure_future(self._leave())

    async def _leave(self) -> None:
        # sessions hosted or being loaded (a reload lets the old stage go before the new one is built:
        # a PNode that left then, hosting nothing for a moment, was lost to its session instead of leaving)
        deadline = time.monotonic() + self.leave_grace_s
        while self._order and time.monotonic() < deadline:
            if time.monotonic() - self._orchestrator_seen > 3.0:
                break  # no orchestrator to hand the VNodes to (the whole system is stopping)
            await asyncio.sleep(0.2)
        if self._order:
            log.warning("leaving with %d session(s) still hosted", len(self._order))
        self._stop.set()

    async def _on_orchestrator_heartbeat(self, msg) -> None:
        self._orchestrator_seen = time.monotonic()

    def beat(self, left: bool = False) -> Heartbeat:
        return Heartbeat(
            pnode=self.name, host=socket.gethostname(), os_pid=os.getpid(), device=self.device_name,
            memory_bytes=self.memory_bytes, ts=time.time(), sessions=sorted(self.stages), leaving=self.leaving or left,
            incarnation=self.incarnation, left=left, throughput=self.throughput, reconnects=self.nc.stats["reconnects"],
        )

    # -- control requests ---------------------------------------------------------
    async def _on_ctl(self, msg) -> None:
        # handled in a task: a long step must not hold up the next message on this subscription
        self._arrivals += 1
        asyncio.ensure_future(self._handle_ctl(msg, self._arrivals))

    async def _handle_ctl(self, msg, arrival: int) -> None:
        try:
            request = REQUESTS.validate_json(msg.data)
        except ValidationError as exc:
            log.warning("rejected a malformed control request: %s", exc.errors()[:3])
            await self._reply(msg, PNodeReply(ok=False, pnode=self.name, error=f"malformed request: {exc.errors()[:3]}"))
            return
        session = getattr(request, "session_id", None)
        if isinstance(request, LoadPlan):
            self._order.setdefault(session, RequestOrder())
            self._release(session)  # before its new stage is built: a reload never holds the session twice
        # None: a session this PNode neither hosts nor loads; `dispatch` answers so, and nothing is kept of it
        order = self._order.get(session)
        if order and isinstance(request, PassRequest):  # before any await: tasks begin in the order they were made
            order.newest_pass = arrival
            self._wake_waiting_passes()
        after_pass = order.newest_pass if order and isinstance(request, ApplyStep) and request.replica_max_norm is not None else None
        step = getattr(request, "step", None)
        if self.fault and self.fault.mutes(request.type, step):
            log.warning("fault injection: %s of step %s accepted, never to be answered", request.type, step)
            return
        started = time.time()
        hosted = self.stages.get(session)
        if order and isinstance(request, (LoadPlan, LoadCheckpoint)):  # the session's weights begin again from these
            order.loads += 1
            order.last_apply = RequestOrder.last_apply
            self._wake_waiting_passes()
        loads = order.loads if order else 0
        self.pending += 1
        await self._status(request, "running", step, started)
        reply = PNodeReply(ok=False, pnode=self.name, step=step, error="not answered")
        began = True  # an update that gave way before it began (`_after_pass`) is none a pass follows
        try:
            if order and isinstance(request, RunStep) and request.after_apply is not None:
                await self._after_apply(session, request.after_apply, arrival)
            if after_pass is not None:
                began = False
                await self._after_pass(session, request.step, after_pass)
                began = True
            if order and isinstance(request, PassRequest) and self._order_of(session).newest_pass != arrival:
                # a newer pass request overtook this one while both awaited their status: the newer runs
                # (this one's asker has given up on it), and must not be aborted by the older
                raise PassSuperseded(f"{request.type} of step {step} was followed by a newer pass request")
            reply = await self._timed(request)
        except InputsNeverCame as exc:
            log.warning("%s gave up: %s", request.type, exc)
            reply = PNodeReply(ok=False, starved=True, pnode=self.name, step=step, error=str(exc))
        except PassSuperseded as exc:
            # dropped (a reset: the orchestrator had declared this PNode lost) or replaced while it ran: what the
            # pass was part of is gone here, as after a restart; the orchestrator recovers as from a lost PNode
            dropped = self.stages.get(session) is not hosted
            log.warning("%s gave up: %s%s", request.type, exc, " (its plan was dropped)" if dropped else "")
            reply = PNodeReply(ok=False, state_lost=dropped, pnode=self.name, step=step, error=f"PassSuperseded: {exc}")
        except self.failures as exc:
            log.warning("%s failed: %s", request.type, exc)
            reply = PNodeReply(ok=False, pnode=self.name, step=step, error=f"{type(exc).__name__}: {exc}")
        finally:
            self.pending -= 1
            if order and isinstance(request, (ApplyStep, RunStep)) and began and self._order_of(session).loads == loads:
                async with self._answered:  # not of before a load
                    now = self._order_of(session)
                    if isinstance(request, ApplyStep):
                        now.last_apply = (request.step, reply.ok)
                    else:
                        now.runs_answered[arrival] = (request.step, reply.ok)
                        now.runs_answered = dict(list(now.runs_answered.items())[-RUNS_KEPT:])
                    self._answered.notify_all()
            if isinstance(request, LoadPlan) and session not in self.stages:  # it failed: nothing of it stays
                self._order.pop(session, None)
        await self._status(request, "done" if reply.ok else "failed", step, started)
        await self._reply(msg, reply)

    async def _after_apply(self, session: str, step: int, arrival: int) -> None:
        """Until this PNode answered the session's ApplyStep of `step`, which the orchestrator sent right
        before this pass (one round trip a step): the pass runs on the weights it updated. However long
        that update takes (the orchestrator allows the pass its time too; the pass's own give-up time is
        for its inputs): what ends the wait sooner is what supersedes the pass, a newer pass request, a
        load, a reset or an unload of the session; the PNode's own limit ends one nobody follows up."""
        order = self._order_of(session)
        loads = order.loads

        def settled() -> bool:  # that very step's update: a rollback leaves the session's last one ahead of it
            now = self._order_of(session)
            return now.last_apply[0] == step or now is not order or now.newest_pass != arrival or now.loads != loads

        await self._until(settled, f"the update of step {step} this pass follows did not come")
        now = self._order_of(session)
        if now.last_apply[0] != step:
            raise PassSuperseded(f"a newer request of the session came while this pass waited for the update of step {step}")
        if not now.last_apply[1]:
            raise PassSuperseded(f"the update of step {step} this pass follows failed here")

    async def _after_pass(self, session: str, step: int, arrival: int) -> None:
        """Until the pass request that arrived as `arrival` (right before this update of `step`, which its
        replica decides: `ApplyStep.replica_max_norm`) has been answered here, so the update runs on its
        gradients; a load, a reset or an unload of the session ends the wait sooner, the PNode's own limit
        one whose pass never ends."""
        order = self._order_of(session)
        loads = order.loads

        def settled() -> bool:
            now = self._order_of(session)
            return arrival in now.runs_answered or now is not order or now.loads != loads

        await self._until(settled, f"the pass of step {step} this update follows did not end")
        ran = self._order_of(session).runs_answered.get(arrival) if self._order_of(session).loads == loads else None
        if ran is None:
            raise PassSuperseded(f"the session's state began again while the update of step {step} waited for its pass")
        if ran != (step, True):
            raise PassSuperseded(f"the pass this update of step {step} follows "
                                 f"{'failed here' if not ran[1] else f'was of step {ran[0]}'}")

    async def _until(self, settled: Callable[[], bool], never: str) -> None:
        """Until `settled()` holds, looked at whenever a RunStep or an ApplyStep is answered (or a pass
        woken), at most the PNode's own limit: then `InputsNeverCame` says what `never` happened."""
        async with self._answered:
            try:
                await asyncio.wait_for(self._answered.wait_for(settled), self.step_deadline_s)
            except asyncio.TimeoutError:
                raise InputsNeverCame(f"{never} within {self.step_deadline_s:.1f}s") from None

    def _wake_waiting_passes(self) -> None:
        """Passes waiting for an update (`_after_apply`) look again: what came may supersede them."""
        async def notify() -> None:
            async with self._answered:
                self._answered.notify_all()

        asyncio.ensure_future(notify())

    def _order_of(self, session: str) -> RequestOrder:
        """The record of a session this PNode hosts or loads; after a reset or an unload, a throwaway
        that matches no request's."""
        return self._order.get(session) or RequestOrder()

    async def _timed(self, request) -> PNodeReply:
        """`dispatch`, with the step's timing published once its ApplyStep is done (`StepTiming`)."""
        if isinstance(request, RunStep):
            self.clock.run_started(request.session_id, request.step)
            reply = await self.dispatch(request)
            self.clock.run_done(request.session_id, reply)
            return reply
        if isinstance(request, ApplyStep):
            t0 = time.monotonic()
            reply = await self.dispatch(request)
            if timing := self.clock.applied(request.session_id, request.step, t0, time.monotonic() - t0):
                await self.nc.publish(self.subjects.tel(self.name, "step"), timing.model_dump_json().encode())
            return reply
        return await self.dispatch(request)

    async def _reply(self, msg, reply: PNodeReply) -> None:
        if msg.reply:
            await self.nc.publish(msg.reply, reply.model_dump_json().encode())

    # -- liveness and telemetry ----------------------------------------------------
    async def _heartbeat(self) -> None:
        while True:
            try:
                await self.nc.publish(self.subjects.heartbeat(self.name), self.beat().model_dump_json().encode())
            except Exception as exc:  # a broken connection must not end the heartbeat loop
                log.warning("heartbeat failed: %s", exc)
            await asyncio.sleep(self.heartbeat_s)

    async def _telemetry(self) -> None:
        while True:
            try:
                sample = await self.memory_sample()
                await self.nc.publish(self.subjects.tel(self.name, "memory"), sample.model_dump_json().encode())
            except Exception as exc:
                log.warning("telemetry failed: %s", exc)
            await asyncio.sleep(self.telemetry_s)

    async def _status(self, request, state: str, step: int | None, started: float) -> None:
        status = RequestStatus(
            pnode=self.name, session_id=request.session_id, request=request.type, step=step, state=state,
            ts=time.time(), duration_s=None if state == "running" else time.time() - started,
        )
        await self.nc.publish(self.subjects.tel(self.name, "request"), status.model_dump_json().encode())
