"""A simulated PNode: the real protocol on the bus, modelled compute, no torch.

It joins, heartbeats, reports telemetry, loads plans, runs steps and validations, applies them, and
saves and loads checkpoints exactly as a PNode does on the wire, so the orchestrator, the monitor
and the dashboard cannot tell it from one. Its compute is `sim_model`'s: modelled time, placeholder
tensors (a few bytes that name the real byte count; the real count of zeros with `full_tensors`),
a loss that depends on (seed, step) alone. Many run in one process (`computeall pnode --simulate
--credential A --credential B ...`), each with its own identity and connection, so 256 of them fit
on a laptop and `bench/swarm.py` can load the orchestrator as a large deployment would.
"""

from __future__ import annotations

import asyncio
import time

from pydantic import BaseModel, ConfigDict, ValidationError

from computeall.network.memory_model import STATE_BYTES
from computeall.protocol import wire
from computeall.protocol.credentials import Credential
from computeall.protocol.object_store import CheckpointObject, existing_bucket
from computeall.protocol.pnode_api import (
    ApplyStep, GenerateSamples, LoadCheckpoint, LoadPlan, PNodeReply, Recompute, SaveCheckpoint, SendCheckMaterial,
)
from computeall.protocol.subjects import Subjects
from computeall.protocol.telemetry import HEARTBEAT_INTERVAL_S, MemorySample
from computeall.protocol.throughput import Throughput

from . import sim_model
from .checkpoint_objects import CheckpointObjectError, fetch, object_name
from .member import BusMember
from .routing import TensorRoute
from .sim_stage import SimulatedStage

PLACEHOLDER_BYTES = 16  # what a placeholder tensor carries; its meta names the real count
DEVICE = "simulated"
NO_SPOT_CHECKS = "a simulated PNode runs no spot checks; leave verification off"


class SimulatedCheckpoint(BaseModel):
    """A simulated VNode's checkpoint object: its state digest and what a real one would weigh."""

    model_config = ConfigDict(extra="forbid")

    simulated: bool = True
    vnode: str
    step: int
    state: str
    real_bytes: int


class SimulatedPNode(BusMember):
    def __init__(self, credential: Credential, memory_bytes: int, subjects: Subjects, flops_per_s: float,
                 full_tensors: bool = False, step_deadline_s: float = 600.0,
                 heartbeat_s: float = HEARTBEAT_INTERVAL_S, telemetry_s: float = 2.0) -> None:
        super().__init__(credential, memory_bytes, DEVICE, subjects, heartbeat_s, telemetry_s, step_deadline_s=step_deadline_s)
        self.flops_per_s = flops_per_s
        self.full_tensors = full_tensors
        self.stages: dict[str, SimulatedStage] = {}
        self.machine = asyncio.Lock()  # what its stages compute on, one item at a time

    async def started(self) -> None:
        self.throughput = Throughput(flops_per_s=self.flops_per_s, bandwidth_bytes_per_s=sim_model.BANDWIDTH_BYTES_PER_S,
                                     rtt_s=sim_model.RTT_S, measured_at=time.time())

    # -- control requests (`member.CONTROL`) ----------------------------------------------
    async def load_plan(self, request: LoadPlan) -> PNodeReply:
        self.host(request.session_id, SimulatedStage(request, self.name, self.flops_per_s, self._send, self.machine))
        return PNodeReply(ok=True, pnode=self.name)

    async def generate_samples(self, request: GenerateSamples) -> PNodeReply:
        return PNodeReply(ok=False, pnode=self.name, step=request.step,
                          error="a simulated PNode generates no samples; leave sample_every unset")

    async def apply_step(self, stage: SimulatedStage, request: ApplyStep) -> PNodeReply:
        return stage.apply(request)  # modelled: no compute to wait for

    async def save_checkpoint(self, stage: SimulatedStage, request: SaveCheckpoint) -> PNodeReply:
        store = await existing_bucket(self.js, request.bucket)
        objects = []
        for vid in stage.local:
            cost = stage.costs[vid]
            data = SimulatedCheckpoint(vnode=vid, step=request.step, state=stage.state[vid],
                                       real_bytes=cost.params * (cost.element_bytes + STATE_BYTES["fp32"].moments),
                                       ).model_dump_json().encode()
            name = object_name(request.session_id, request.step, vid, suffix="sim.json")
            await store.put(name, data)
            objects.append(CheckpointObject(vnode=vid, object=name, digest=wire.digest(data), bytes=len(data)))
        return PNodeReply(ok=True, pnode=self.name, step=request.step, checkpoint=objects)

    async def load_checkpoint(self, stage: SimulatedStage, request: LoadCheckpoint) -> PNodeReply:
        store = await existing_bucket(self.js, request.bucket)
        by_vnode = {o.vnode: o for o in request.objects}
        for vid in stage.local:
            if vid not in by_vnode:
                raise CheckpointObjectError(f"checkpoint at step {request.step} has no object for {vid}")
            data = await fetch(store, request.bucket, by_vnode[vid])
            try:
                saved = SimulatedCheckpoint.model_validate_json(data)
            except ValidationError:
                raise CheckpointObjectError(f"{by_vnode[vid].object} is not a simulated PNode's checkpoint") from None
            if saved.vnode != vid:
                raise CheckpointObjectError(f"{by_vnode[vid].object} holds {saved.vnode}, not {vid}")
            stage.state[vid] = saved.state
        stage.admission.restored(request.step)
        return PNodeReply(ok=True, pnode=self.name, step=request.step)

    async def send_check_material(self, stage: SimulatedStage, request: SendCheckMaterial) -> PNodeReply:
        raise ValueError(NO_SPOT_CHECKS)

    async def recompute(self, stage: SimulatedStage, request: Recompute) -> PNodeReply:
        raise ValueError(NO_SPOT_CHECKS)

    # -- tensors ----------------------------------------------------------------------
    async def _send(self, pnode: str, real_bytes: int, route: TensorRoute) -> None:
        size = real_bytes if self.full_tensors else min(real_bytes, PLACEHOLDER_BYTES)
        meta = {**route.wire_meta(), "bytes": real_bytes}
        for frame in wire.encode(route.wire_key, "uint8", [size], bytes(size), self.nc.max_payload, meta):
            await self.nc.publish(self.subjects.pnode_tensor(pnode, self.name), frame)

    async def on_tensor(self, msg) -> None:
        try:
            delivery = self.inbound.take(msg.subject, msg.data)
            if delivery is None:
                return
            if not isinstance(delivery.route, TensorRoute):
                raise wire.WireError(f"{delivery.route.wire_key!r}: {NO_SPOT_CHECKS}")
            delivery.stage.receive(delivery.route)
        except wire.WireError as exc:
            self.inbound.refused(exc)

    # -- telemetry --------------------------------------------------------------------
    async def memory_sample(self) -> MemorySample:
        categories: dict[str, int] = {}
        for stage in self.stages.values():
            for k, v in sim_model.memory_by_category(stage.costs).items():
                categories[k] = categories.get(k, 0) + v
        modelled = sum(v for k, v in categories.items() if k != "params")
        return MemorySample(
            pnode=self.name, ts=time.time(), rss_bytes=modelled, bytes_by_category=categories,
            pending_requests=self.pending, hosted_vnodes=[v for s in self.stages.values() for v in s.local],
        )
