"""The PNode process: hosts session stages in torch, moves tensors, reports their memory. Its life on
the bus (membership, heartbeats, leaving, control requests) is `member.BusMember`'s."""

from __future__ import annotations

import asyncio
import logging
import time
from concurrent.futures import ThreadPoolExecutor

import nats.errors
import psutil
import torch

from computeall.network.memory_model import StepShape, hosting_bytes
from computeall.protocol.credentials import Credential
from computeall.protocol.dataset_api import pnode_batch_subject
from computeall.protocol.pnode_api import (
    GenerateSamples, LoadCheckpoint, LoadPlan, PNodeReply, Recompute, SaveCheckpoint, SendCheckMaterial,
)
from computeall.protocol.subjects import Subjects
from computeall.protocol.telemetry import HEARTBEAT_INTERVAL_S, Heartbeat, MemorySample, VNodeMemory
from computeall.protocol.wire import WireError
from computeall.tensorcore.backend import device_memory, map_large_allocations
from computeall.tensorcore.checkpoint import CheckpointError
from computeall.tensorcore.digest import received_digest
from computeall.protocol.faults import FaultSpec
from computeall.tensorcore.tensor_frames import tensor_frames, tensor_from_wire

from . import checkpoints, checks, sampling, throughput
from .batches import BatchFeed
from .faults import Faults
from .lean_memory import wants_lean_memory
from .member import BusMember, wait_deadline
from .memory import bytes_by_category, vnode_memory
from .transport import Link
from .warm_up import warm_up
from .routing import CheckPartRoute, TensorRoute
from .stage import SessionStage

log = logging.getLogger("computeall.pnode")

REMEASURE_S = 120.0  # how often a PNode hosting nothing measures its link again


class PNode(BusMember):
    failures = BusMember.failures + (CheckpointError,)

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
        super().__init__(credential, memory_bytes, str(device), subjects, heartbeat_s, telemetry_s, fault, step_deadline_s)
        self.device = device
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"{self.name}-compute")
        # frames in and out (digests, copies, decoding) on their own thread: off the event loop and
        # off the compute thread, so sending and receiving overlap compute
        self.wire = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"{self.name}-wire")
        self.sampling_executor = sampling.sampling_executor(self.name)
        self.stages: dict[str, SessionStage] = {}
        self.process = psutil.Process()
        # a testing option: wrong results on purpose
        self.faults = Faults(fault, self.name) if fault and fault.mode == "corrupt" else None
        self.check_executor = checks.check_executor(self.name)
        self.lean_memory = False  # `lean_memory`: set for good once a plan asks for it
        self.process_bytes = 0  # resident once started and warmed up (`warm_up`), before hosting anything

    # -- what it measures of itself ---------------------------------------------
    async def started(self) -> None:
        self.flops_per_s = await asyncio.get_running_loop().run_in_executor(
            self.executor, throughput.compute_flops_per_s, self.device)
        await asyncio.get_running_loop().run_in_executor(self.executor, warm_up, self.device)
        if self.device.type == "cpu":  # the offer is host memory: torch and this process live in it too
            self.process_bytes = self.process.memory_info().rss
        await self._measure()  # before the first heartbeat: the one the orchestrator records as PNodeJoined

    def background(self) -> list:
        return [self._remeasure()]

    async def _measure(self) -> None:
        try:
            self.throughput = await throughput.measure(self.nc, self.subjects.pnode_probe(self.name), self.flops_per_s)
        except (nats.errors.Error, TimeoutError) as exc:
            log.warning("could not measure the link to the bus (%s); keeping %s", exc, self.throughput)

    async def _remeasure(self) -> None:
        """Links change: measure again now and then, only while hosting nothing (a probe would slow a step)."""
        while True:
            await asyncio.sleep(REMEASURE_S)
            if not self.stages and not self.pending:
                await self._measure()

    def closed(self) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)
        self.wire.shutdown(wait=False, cancel_futures=True)
        self.sampling_executor.shutdown(wait=False, cancel_futures=True)
        self.check_executor.shutdown(wait=False, cancel_futures=True)

    def beat(self, left: bool = False) -> Heartbeat:
        return super().beat(left).model_copy(update={"threads": torch.get_num_threads(), "process_bytes": self.process_bytes})

    # -- control requests (`member.CONTROL`) ----------------------------------------------
    async def load_plan(self, request: LoadPlan) -> PNodeReply:
        def feeds(split: str, micro_batches: int) -> BatchFeed:
            return BatchFeed(self.nc, pnode_batch_subject(self.subjects, self.name), request.session_id, request.batches,
                             split, micro_batches)

        stage = await asyncio.get_running_loop().run_in_executor(
            self.executor,
            lambda: SessionStage(request, self.name, self.device, self.executor, feeds, self._link(), self.faults),
        )
        self.host(request.session_id, stage)
        log.info("session %s: hosting %s", request.session_id, ", ".join(stage.local) or "nothing")
        shape = StepShape(request.batches.micro_batch_size, len(request.block), request.optimizer.state)
        if wants_lean_memory(stage.graph, stage.local, shape, hosting_bytes(self.memory_bytes, self.process_bytes)):
            stage.runtime.defer_tied_gradients()
            if not self.lean_memory:
                self.lean_memory = map_large_allocations()
                log.info("session %s: freed tensors go back to the OS at once from now on (lean memory)",
                         request.session_id)
        return PNodeReply(ok=True, pnode=self.name)

    async def generate_samples(self, request: GenerateSamples) -> PNodeReply:
        samples = await sampling.generate(self.js, request, self.sampling_executor)  # off the compute executor
        return PNodeReply(ok=True, pnode=self.name, step=request.step, samples=samples)

    async def save_checkpoint(self, stage: SessionStage, request: SaveCheckpoint) -> PNodeReply:
        saved = await checkpoints.save(self.js, stage, request, wait_deadline(request, self.step_deadline_s))
        return PNodeReply(ok=True, pnode=self.name, step=request.step, checkpoint=saved)

    async def load_checkpoint(self, stage: SessionStage, request: LoadCheckpoint) -> PNodeReply:
        await checkpoints.load(self.js, stage, request)
        stage.rolled_back(request.step)
        return PNodeReply(ok=True, pnode=self.name, step=request.step)

    async def send_check_material(self, stage: SessionStage, request: SendCheckMaterial) -> PNodeReply:
        return await checks.send_material(stage, request, self._send_check_part)

    async def recompute(self, stage: SessionStage, request: Recompute) -> PNodeReply:
        return await checks.run_check(stage, request, self.step_deadline_s, self.check_executor)

    # -- tensors --------------------------------------------------------------------
    def _link(self) -> Link:
        return Link(self._publish_frames, lambda: self.nc.max_payload, self.wire)

    async def _publish_frames(self, pnode: str, frames: list[bytes]) -> None:
        subject = self.subjects.pnode_tensor(pnode, self.name)
        for frame in frames:
            await self.nc.publish(subject, frame)

    async def _send_check_part(self, pnode: str, tensor: torch.Tensor, route: CheckPartRoute) -> None:
        """Check material, to the checker: framed on the wire thread, as the outbox frames a step's tensors."""
        frames = await asyncio.get_running_loop().run_in_executor(
            self.wire, tensor_frames, route.wire_key, tensor, self.nc.max_payload, route.wire_meta()
        )
        await self._publish_frames(pnode, frames)

    async def on_tensor(self, msg) -> None:
        try:
            received = await asyncio.get_running_loop().run_in_executor(self.wire, self._reassemble, msg.subject, msg.data)
            if received is None:
                return
            stage, route, payload = received
            if isinstance(route, CheckPartRoute):
                stage.check_inbox.receive(route, payload)
            else:
                stage.receive(route, payload)
        except WireError as exc:
            self.inbound.refused(exc)

    def _reassemble(
        self, subject: str, frame: bytes
    ) -> tuple[SessionStage, TensorRoute, torch.Tensor] | tuple[SessionStage, CheckPartRoute, checks.Part] | None:
        """On the wire thread: one frame in, checked against its session's plan before it is kept; the
        decoded tensor (check material: with its sender and its digest, which the wire verified), its
        stage and route once all its frames are."""
        delivery = self.inbound.take(subject, frame)
        if delivery is None:
            return None
        stage, route, received = delivery.stage, delivery.route, delivery.tensor
        if isinstance(route, TensorRoute):
            return stage, route, tensor_from_wire(received, self.device)
        if received.encoding != "raw":  # as hosts send it: its digest is then the wire's
            raise WireError(f"check material {received.key!r} came {received.encoding}, not raw")
        return stage, route, checks.Part(tensor_from_wire(received, self.device), received_digest(received), delivery.sender)

    # -- telemetry --------------------------------------------------------------------
    async def memory_sample(self) -> MemorySample:
        allocated, reserved = device_memory(self.device)
        # on the compute thread, between steps: reading a gradient while backward writes it segfaulted
        vnodes, checks = await asyncio.get_running_loop().run_in_executor(self.executor, self._held)
        return MemorySample(
            pnode=self.name, ts=time.time(), rss_bytes=self.process.memory_info().rss,
            gpu_allocated_bytes=allocated, gpu_reserved_bytes=reserved, bytes_by_category=bytes_by_category(vnodes, checks),
            pending_requests=self.pending, hosted_vnodes=[v for s in self.stages.values() for v in s.local], vnodes=vnodes,
        )

    def _held(self) -> tuple[list[VNodeMemory], int]:
        """Each hosted VNode's bytes by kind, and what the stages' spot checks keep."""
        stages = list(self.stages.items())
        return ([v for sid, stage in stages for v in vnode_memory(sid, stage)],
                sum(stage.audit.nbytes() for _, stage in stages if stage.audit))
