"""The PNode process: registers, heartbeats, hosts session stages, moves tensors, reports telemetry."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import nats.errors
import psutil
import torch
from pydantic import TypeAdapter, ValidationError

from computeall.protocol import bus
from computeall.protocol.credentials import Credential
from computeall.protocol.envelope import Envelope
from computeall.protocol.pnode_api import (
    ApplyStep,
    GenerateSamples,
    LoadCheckpoint,
    LoadPlan,
    PNodeReply,
    PNodeRequest,
    Recompute,
    RunStep,
    Reset,
    RunValidation,
    SaveCheckpoint,
    SendCheckMaterial,
    Unload,
)
from computeall.protocol.faults import FaultSpec
from computeall.protocol.subjects import Subjects
from computeall.protocol.telemetry import HEARTBEAT_INTERVAL_S, Heartbeat, MemorySample, RequestStatus
from computeall.protocol.throughput import Throughput
from computeall.protocol.wire import Reassembler, WireError
from computeall.tensorcore.backend import device_memory
from computeall.tensorcore.checkpoint import CheckpointError
from computeall.tensorcore.wire import tensor_frames, tensor_from_wire

from . import checkpoints, checks, sampling, throughput
from .batches import BatchFeed
from .faults import Faults
from .memory import bytes_by_category
from .outbox import Link
from .routing import CheckPartRoute, TensorRoute
from .stage import SessionStage, StepAborted
from .step_timing import StepClock

log = logging.getLogger("computeall.pnode")

REQUESTS = TypeAdapter(PNodeRequest)
REMEASURE_S = 120.0  # how often a PNode hosting nothing measures its link again


class PNode:
    def __init__(
        self,
        credential: Credential,
        memory_bytes: int,
        device: torch.device,
        subjects: Subjects,
        step_deadline_s: float = 600.0,
        heartbeat_s: float = HEARTBEAT_INTERVAL_S,
        telemetry_s: float = 2.0,
        fault: FaultSpec | None = None,
    ) -> None:
        self.credential = credential
        self.name = credential.name  # the identity the server knows it by: its subjects carry it
        self.memory_bytes = memory_bytes
        self.device = device
        self.subjects = subjects
        self.step_deadline_s = step_deadline_s
        self.heartbeat_s = heartbeat_s
        self.telemetry_s = telemetry_s
        self.faults = Faults(fault, self.name) if fault else None  # a testing option: wrong results on purpose
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"{self.name}-compute")
        # frames in and out (digests, copies, decoding) on their own thread: off the event loop and
        # off the compute thread, so sending and receiving overlap compute
        self.wire = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"{self.name}-wire")
        self.sampling_executor = sampling.sampling_executor(self.name)
        self.check_executor = checks.check_executor(self.name)
        self.stages: dict[str, SessionStage] = {}
        self.reassembler = Reassembler()
        self.rejected_frames = 0
        self.pending = 0
        self.leaving = False
        self.incarnation = uuid.uuid4().hex
        self.leave_grace_s = 60.0
        self._orchestrator_seen = 0.0  # monotonic time of the last orchestrator heartbeat
        self.throughput: Throughput | None = None
        self.clock = StepClock(self.name)
        self._stop = asyncio.Event()
        self.refused: str | None = None  # why the bus stopped accepting this PNode (revoked, expired)

    async def run(self) -> None:
        self.nc = await bus.connect(self.credential, name=f"pnode-{self.name}", max_reconnect_attempts=-1,
                                    error_cb=self._on_bus_error)
        self.js = self.nc.jetstream()
        await self.nc.subscribe(self.subjects.pnode_ctl(self.name), cb=self._on_ctl)
        await self.nc.subscribe(
            self.subjects.pnode_tensor(self.name), cb=self._on_tensor, pending_bytes_limit=1 << 30
        )
        await self.nc.subscribe(self.subjects.orchestrator_heartbeat_all(), cb=self._on_orchestrator_heartbeat)
        flops = await asyncio.get_running_loop().run_in_executor(self.executor, throughput.compute_flops_per_s, self.device)
        await self._measure(flops)  # before the first heartbeat: the one the orchestrator records as PNodeJoined
        # no event of its own: the orchestrator records PNodeJoined/PNodeLeft from the heartbeats
        log.info("pnode %s ready on %s (%s, %.1f GiB; measured %s)", self.name, ", ".join(self.credential.servers),
                 self.device, self.memory_bytes / 2**30, self.throughput)
        tasks = [asyncio.create_task(self._heartbeat()), asyncio.create_task(self._telemetry()),
                 asyncio.create_task(self._remeasure(flops))]
        await self._stop.wait()
        for t in tasks:
            t.cancel()
        try:
            if self.refused:  # nothing to say goodbye on; closing ends nats-py's reconnect attempts
                await asyncio.wait_for(self.nc.close(), 5)  # bounded: seen to hang flushing a dead TLS link
            else:
                await self.nc.publish(self.subjects.heartbeat(self.name), self._beat(left=True).model_dump_json().encode())
                await self.nc.drain()
        except (nats.errors.Error, TimeoutError):
            pass  # the server went away first
        self.executor.shutdown(wait=False, cancel_futures=True)
        self.wire.shutdown(wait=False, cancel_futures=True)
        self.sampling_executor.shutdown(wait=False, cancel_futures=True)
        self.check_executor.shutdown(wait=False, cancel_futures=True)

    async def _on_bus_error(self, exc: Exception) -> None:
        if "authorization violation" in str(exc).lower():  # revoked or expired: no reconnect will help
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
        deadline = time.monotonic() + self.leave_grace_s
        while self.stages and time.monotonic() < deadline:
            if time.monotonic() - self._orchestrator_seen > 3.0:
                break  # no orchestrator to hand the VNodes to (the whole system is stopping)
            await asyncio.sleep(0.2)
        if self.stages:
            log.warning("leaving with %d session(s) still hosted", len(self.stages))
        self._stop.set()

    async def _on_orchestrator_heartbeat(self, msg) -> None:
        self._orchestrator_seen = time.monotonic()

    def _beat(self, left: bool = False) -> Heartbeat:
        return Heartbeat(
            pnode=self.name, host=socket.gethostname(), os_pid=os.getpid(), device=str(self.device),
            memory_bytes=self.memory_bytes, ts=time.time(), sessions=sorted(self.stages), leaving=self.leaving or left,
            incarnation=self.incarnation, left=left, throughput=self.throughput, threads=torch.get_num_threads(),
        )

    # -- what it measures of itself ---------------------------------------------
    async def _measure(self, flops_per_s: float) -> None:
        try:
            self.throughput = await throughput.measure(self.nc, self.subjects.pnode_probe(self.name), flops_per_s)
        except (nats.errors.Error, TimeoutError) as exc:
            log.warning("could not measure the link to the bus (%s); keeping %s", exc, self.throughput)

    async def _remeasure(self, flops_per_s: float) -> None:
        """Links change: measure again now and then, only while hosting nothing (a probe would slow a step)."""
        while True:
            await asyncio.sleep(REMEASURE_S)
            if not self.stages and not self.pending:
                await self._measure(flops_per_s)

    # -- control requests ---------------------------------------------------------
    async def _on_ctl(self, msg) -> None:
        # handled in a task: a long step must not hold up the next message on this subscription
        asyncio.ensure_future(self._handle_ctl(msg))

    async def _handle_ctl(self, msg) -> None:
        try:
            request = REQUESTS.validate_json(msg.data)
        except ValidationError as exc:
            log.warning("rejected a malformed control request: %s", exc.errors()[:3])
            await self._reply(msg, PNodeReply(ok=False, pnode=self.name, error=f"malformed request: {exc.errors()[:3]}"))
            return
        started = time.time()
        self.pending += 1
        step = getattr(request, "step", None)
        await self._status(request, "running", step, started)
        try:
            reply = await self._dispatch(request)
        except (StepAborted, CheckpointError, KeyError, ValueError, RuntimeError, nats.errors.Error) as exc:
            log.warning("%s failed: %s", request.type, exc)
            reply = PNodeReply(ok=False, pnode=self.name, step=step, error=f"{type(exc).__name__}: {exc}")
        finally:
            self.pending -= 1
        await self._status(request, "done" if reply.ok else "failed", step, started)
        await self._reply(msg, reply)

    async def _dispatch(self, request) -> PNodeReply:
        if isinstance(request, Reset):
            for stage in self.stages.values():
                stage.abort()
            self.stages.clear()
            log.info("reset: dropped every session (this PNode had been declared lost)")
            return PNodeReply(ok=True, pnode=self.name)
        if isinstance(request, LoadPlan):
            def feeds(split: str, micro_batches: int) -> BatchFeed:
                return BatchFeed(self.nc, self.subjects, request.batches, split, micro_batches)

            stage = await asyncio.get_running_loop().run_in_executor(
                self.executor,
                lambda: SessionStage(request, self.name, self.device, self.executor, feeds, self._link(), self.faults),
            )
            old = self.stages.get(request.session_id)
            if old is not None:
                old.abort()
            self.stages[request.session_id] = stage
            log.info("session %s: hosting %s", request.session_id, ", ".join(stage.local) or "nothing")
            return PNodeReply(ok=True, pnode=self.name)
        if isinstance(request, GenerateSamples):  # reads a checkpoint, not the stage: off the compute executor
            samples = await sampling.generate(self.js, request, self.sampling_executor)
            return PNodeReply(ok=True, pnode=self.name, step=request.step, samples=samples)
        stage = self.stages.get(request.session_id)
        if stage is None:
            return PNodeReply(ok=False, pnode=self.name, error=f"no plan loaded for session {request.session_id}")
        if isinstance(request, RunStep):
            self.clock.run_started(request.session_id, request.step)
            reply = await stage.run_step(request, self.step_deadline_s)
            self.clock.run_done(request.session_id, reply)
            return reply
        if isinstance(request, ApplyStep):
            t0 = time.monotonic()
            reply = await stage.apply(request)
            if timing := self.clock.applied(request.session_id, request.step, t0, time.monotonic() - t0):
                await self.nc.publish(self.subjects.tel(self.name, "step"), timing.model_dump_json().encode())
            return reply
        if isinstance(request, RunValidation):
            return await stage.run_validation(request, self.step_deadline_s)
        if isinstance(request, SaveCheckpoint):
            saved = await checkpoints.save(self.js, stage, request)
            return PNodeReply(ok=True, pnode=self.name, step=request.step, checkpoint=saved)
        if isinstance(request, LoadCheckpoint):
            await checkpoints.load(self.js, stage, request)
            stage.rolled_back()
            return PNodeReply(ok=True, pnode=self.name, step=request.step)
        if isinstance(request, SendCheckMaterial):
            return await checks.send_material(stage, request, self._send_check_part)
        if isinstance(request, Recompute):
            return await checks.run_check(stage, request, self.step_deadline_s, self.check_executor)
        if isinstance(request, Unload):
            self.stages.pop(request.session_id).abort()
            return PNodeReply(ok=True, pnode=self.name)
        raise ValueError(f"unknown request {request!r}")

    async def _reply(self, msg, reply: PNodeReply) -> None:
        if msg.reply:
            await self.nc.publish(msg.reply, reply.model_dump_json().encode())

    # -- tensors --------------------------------------------------------------------
    def _link(self) -> Link:
        return Link(self._publish_frames, lambda: self.nc.max_payload, self.wire)

    async def _send_check_part(self, pnode: str, tensor: torch.Tensor, route: CheckPartRoute) -> None:
        """Check material, to the checker: framed on the wire thread, as the outbox frames a step's tensors."""
        frames = await asyncio.get_running_loop().run_in_executor(
            self.wire, tensor_frames, route.wire_key, tensor, self.nc.max_payload, route.wire_meta()
        )
        await self._publish_frames(pnode, frames)

    async def _publish_frames(self, pnode: str, frames: list[bytes]) -> None:
        subject = self.subjects.pnode_tensor(pnode)
        for frame in frames:
            await self.nc.publish(subject, frame)

    async def _on_tensor(self, msg) -> None:
        try:
            received = await asyncio.get_running_loop().run_in_executor(self.wire, self._reassemble, msg.data)
            if received is None:
                return
            stage, route, tensor = received
            if isinstance(route, CheckPartRoute):
                stage.check_inbox.receive(route, tensor)
            else:
                stage.receive(route, tensor)
        except WireError as exc:
            self.rejected_frames += 1
            log.warning("rejected a tensor frame (%d so far): %s", self.rejected_frames, exc)

    def _reassemble(self, frame: bytes) -> tuple[SessionStage, TensorRoute | CheckPartRoute, torch.Tensor] | None:
        """On the wire thread: one frame in; the decoded tensor, its stage and route once all its frames are."""
        received = self.reassembler.feed(frame)
        if received is None:
            return None
        stage = self.stages.get(str(received.meta.get("session")))
        if stage is None:
            raise WireError(f"tensor {received.key!r} for a session this PNode does not host")
        if received.meta.get("kind") != "check":
            return stage, TensorRoute.from_wire(received.key, received.meta), tensor_from_wire(received, self.device)
        if stage.check_inbox is None:
            raise WireError(f"check material {received.key!r} for a session not verified here")
        return stage, CheckPartRoute.from_wire(received.key, received.meta), tensor_from_wire(received, self.device)

    # -- liveness and telemetry ----------------------------------------------------
    async def _heartbeat(self) -> None:
        while True:
            try:
                await self.nc.publish(self.subjects.heartbeat(self.name), self._beat().model_dump_json().encode())
            except Exception as exc:  # a broken connection must not end the heartbeat loop
                log.warning("heartbeat failed: %s", exc)
            await asyncio.sleep(self.heartbeat_s)

    def _bytes_by_category(self) -> dict[str, int]:
        categories: dict[str, int] = {}
        for stage in list(self.stages.values()):
            for k, v in bytes_by_category(stage).items():
                categories[k] = categories.get(k, 0) + v
        return categories

    async def _telemetry(self) -> None:
        process = psutil.Process()
        while True:
            allocated, reserved = device_memory(self.device)
            # on the compute thread, between steps: reading a gradient while backward writes it segfaulted
            categories = await asyncio.get_running_loop().run_in_executor(self.executor, self._bytes_by_category)
            sample = MemorySample(
                pnode=self.name, ts=time.time(), rss_bytes=process.memory_info().rss,
                gpu_allocated_bytes=allocated, gpu_reserved_bytes=reserved, bytes_by_category=categories,
                pending_requests=self.pending, hosted_vnodes=[v for s in self.stages.values() for v in s.local],
            )
            try:
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
