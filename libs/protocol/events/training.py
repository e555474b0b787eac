"""What a session's training did: its allocation, steps, loss scale, validations and checkpoints."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from ..object_store import CheckpointObject
from .base import DomainEvent, recorded_as


class VNodePlacement(BaseModel):
    vnode: str
    op: str
    pnode: str
    params: int
    precision: str
    replica: int = 0  # with data-parallel replicas, every VNode is placed once per replica


class EdgeTraffic(BaseModel):
    src: str
    dst: str
    bytes_per_step: int
    replica: int = 0


@recorded_as("session")
class Allocated(DomainEvent):
    type: Literal["Allocated"] = "Allocated"
    placements: list[VNodePlacement]
    edges: list[EdgeTraffic]
    pnodes: list[str]  # those that host a stage
    bytes_across_per_step: int
    replicas: int = 1  # data-parallel replicas of the pipeline
    estimated_step_s: float | None = None  # the allocator's estimate of a step on these PNodes and links
    standbys: list[str] = Field(
        default_factory=list, description="PNodes offered to the session that host nothing (another stage would not "
        "have shortened the step, `pipeline.stages`); on a loss one with room takes a lost PNode's VNodes as they were",
    )
    in_flight: list[int | None] = Field(
        default_factory=list, description="per replica: the micro-batches each of its PNodes holds at once (1f1b), "
        "the session's `pipeline.in_flight` or what the allocator decided from the measured round trips; "
        "None: the PNode's default",
    )


@recorded_as("session")
class StepCompleted(DomainEvent):
    type: Literal["StepCompleted"] = "StepCompleted"
    step: int
    loss: float
    tokens: int
    step_time_s: float
    lr: float
    loss_scale: float = 1.0
    compute_s: float = 0.0
    wait_s: float = 0.0
    wire_bytes: int = 0  # tensor bytes sent PNode to PNode in the step, every link together
    reduce_bytes: int = 0  # sent between replicas: gradient sums (or diloco's pseudo-gradients)
    grad_norm: float | None = None  # global L2 norm of the unscaled gradients, before clipping; None: skipped
    clipped: bool = False  # the gradients were scaled down to the session's grad_clip
    compute_s_by_pnode: dict[str, float] = Field(default_factory=dict)  # each PNode's compute seconds


@recorded_as("session")
class UpdateRatios(DomainEvent):
    """After `step`'s update: |update| / |weights| of every VNode group (a block such as `b0`, or a
    VNode outside any block), measured every `update_ratio_every` steps."""

    type: Literal["UpdateRatios"] = "UpdateRatios"
    step: int
    ratios: dict[str, float]


@recorded_as("session")
class LossScaleChanged(DomainEvent):
    """The orchestrator changed the loss scale after `step` (it applies from step + 1)."""

    type: Literal["LossScaleChanged"] = "LossScaleChanged"
    step: int
    old: float
    new: float
    reason: Literal["overflow", "growth"]


@recorded_as("session")
class StepSkipped(DomainEvent):
    """No PNode applied `step`'s update (its gradients overflowed somewhere); the step still counts."""

    type: Literal["StepSkipped"] = "StepSkipped"
    step: int
    reason: str


@recorded_as("session")
class ValidationCompleted(DomainEvent):
    type: Literal["ValidationCompleted"] = "ValidationCompleted"
    step: int
    loss: float
    perplexity: float
    tokens: int


@recorded_as("session")
class CheckpointCommitted(DomainEvent):
    """The state after `step` steps; counts only once this event is in the log."""

    type: Literal["CheckpointCommitted"] = "CheckpointCommitted"
    step: int  # steps completed: training continues with step `step`
    bucket: str
    objects: list[CheckpointObject]
    seconds: float

    @property
    def model_objects(self) -> list[CheckpointObject]:
        """One object per VNode: the model (diloco's replicas each write theirs; the first stands for all)."""
        return [o for o in self.objects if o.replica == 0]


@recorded_as("session")
class CheckpointPruned(DomainEvent):
    type: Literal["CheckpointPruned"] = "CheckpointPruned"
    step: int


@recorded_as("session")
class CheckpointDiscarded(DomainEvent):
    """The checkpoint at `step` was found damaged (read by the orchestrator and checked against the digests
    its `CheckpointCommitted` names) and no longer counts: the session goes on from an older one, and
    saves this step again when it gets there."""

    type: Literal["CheckpointDiscarded"] = "CheckpointDiscarded"
    step: int
    reason: str


@recorded_as("session")
class InitializedFrom(DomainEvent):
    """The PNodes loaded the session's first weights from its `init_from` (the optimizer starts fresh);
    checkpoint 0 follows, so nothing later needs the source again."""

    type: Literal["InitializedFrom"] = "InitializedFrom"
    source: str  # "session SID at step N", or what uploaded weights were made from
    session_id: str | None = None
    step: int | None = None
    bucket: str
    objects: list[CheckpointObject]


class Sample(BaseModel):
    prompt: str
    text: str  # what the model wrote after the prompt
    tokens: int  # how many it wrote


@recorded_as("session")
class SamplesGenerated(DomainEvent):
    """Text the model wrote from the checkpoint after `step` steps, one sample per configured prompt."""

    type: Literal["SamplesGenerated"] = "SamplesGenerated"
    step: int
    samples: list[Sample]
    pnode: str  # who generated them
    seconds: float
