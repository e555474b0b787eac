"""Telemetry on `ca.tel.<pid>.<kind>`, recorded in CA_TEL (limited age and size)."""

from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import BaseModel, ConfigDict, Field

from .throughput import Throughput

HEARTBEAT_INTERVAL_S = 1.0  # how often a PNode sends its Heartbeat
# A PNode silent this long is lost: the orchestrator records PNodeLost, the monitor shows it lost.
HEARTBEAT_TIMEOUT_S = 5.0


class Heartbeat(BaseModel):
    """On `ca.hb.<pid>` every `HEARTBEAT_INTERVAL_S`; not recorded. Also how a PNode advertises itself."""

    model_config = ConfigDict(extra="forbid")

    pnode: str
    host: str
    os_pid: int
    device: str
    memory_bytes: int  # what it offers to train in
    ts: float
    # the allocator plans within memory_bytes less this, since the memory model counts only what training adds
    process_bytes: int = Field(default=0, ge=0, description=(
        "resident before it hosts anything, once a step of a micro network paid what any first step sets up "
        "(torch itself, on a CPU PNode; `pnode.warm_up`)"))
    sessions: list[str] = Field(default_factory=list)
    leaving: bool = False  # SIGTERM received: move my VNodes elsewhere, then I exit
    incarnation: str = ""  # new at every process start: a PNode restarted under the same name lost its state
    throughput: Throughput | None = None  # what it measured of its compute and its link to the bus
    left: bool = False  # the last heartbeat of a process that is exiting (the orchestrator records PNodeLeft)
    threads: int | None = None  # torch's intra-op threads: a spot check of its results recomputes with as many
    reconnects: int = 0  # times its bus connection was made again (a nats-server died): messages in flight were lost


class OrchestratorBeat(BaseModel):
    """On `ca.orch.hb.<orchestrator id>` every second; not recorded. An empty body (an older orchestrator's)
    reads as an active one's."""

    model_config = ConfigDict(extra="forbid")

    standby: bool = False  # it takes no commands while an active orchestrator beats (`computeall up --join-bus`)


class RequestStatus(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: Literal["RequestStatus"] = "RequestStatus"
    pnode: str
    session_id: str
    request: str  # LoadPlan, RunStep, ApplyStep, ...
    step: int | None = None
    state: Literal["queued", "running", "done", "failed"]
    ts: float
    duration_s: float | None = None


VNODE_MEMORY_KINDS = ("weights", "master", "optimizer", "gradients", "activations")


class VNodeMemory(BaseModel):
    """What one hosted VNode holds on its PNode, in bytes by kind (a tied weight counts under its owner)."""

    model_config = ConfigDict(extra="forbid")

    session_id: str
    vnode: str
    params: int = Field(..., ge=0, description="its parameters: any kind over this is bytes per parameter")
    weights: int = Field(..., ge=0, description="the parameters in the VNode's precision")
    master: int = Field(..., ge=0, description="fp32 masters of low-precision parameters (or a bf16 weight's low half)")
    optimizer: int = Field(..., ge=0, description="Adam moments (fp32, or 8-bit codes with their scales)")
    gradients: int = Field(..., ge=0, description="the parameters' gradients, while a step holds them")
    activations: int = Field(..., ge=0, description="what is kept for backward: outputs, or a recomputing VNode's inputs")


class MemorySample(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: Literal["MemorySample"] = "MemorySample"
    pnode: str
    ts: float
    rss_bytes: int
    gpu_allocated_bytes: int | None = None
    gpu_reserved_bytes: int | None = None
    # the sums of `vnodes` by kind, "params", and "checks" (what spot checks keep until settled)
    bytes_by_category: dict[str, int] = Field(default_factory=dict)
    pending_requests: int = 0
    hosted_vnodes: list[str] = Field(default_factory=list)
    vnodes: list[VNodeMemory] = Field(default_factory=list, description="each hosted VNode's bytes by kind")


class StepTiming(BaseModel):
    """A PNode's part in one training step, from its RunStep arriving to its ApplyStep done: where
    the time went and what it sent. On `ca.tel.<pid>.step` once the step is applied."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["StepTiming"] = "StepTiming"
    pnode: str
    session_id: str
    step: int
    ts: float
    step_s: float = Field(..., ge=0, description="RunStep arriving to ApplyStep done")
    compute_s: float = Field(0.0, ge=0, description="the compute thread running work items and the optimizer")
    send_s: float = Field(0.0, ge=0, description="sending tensors to other PNodes (overlaps compute when the outbox does)")
    wait_s: float = Field(0.0, ge=0, description="waiting for inputs from other PNodes or the dataset: the bubble")
    sent_bytes: dict[str, int] = Field(default_factory=dict, description="tensor bytes sent, by destination PNode")


Telemetry = Annotated[Union[RequestStatus, MemorySample, StepTiming], Field(discriminator="type")]
