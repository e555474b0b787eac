"""What a session's training did: its allocation, steps, loss scale, validations and checkpoints."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

from ..object_store import CheckpointObject
from .base import DomainEvent, recorded_as


class VNodePlacement(BaseModel):
    vnode: str
    op: str
    pnode: str
    params: int
    precision: str


class EdgeTraffic(BaseModel):
    src: str
    dst: str
    bytes_per_step: int


@recorded_as("session")
class Allocated(DomainEvent):
    type: Literal["Allocated"] = "Allocated"
    placements: list[VNodePlacement]
    edges: list[EdgeTraffic]
    pnodes: list[str]
    bytes_across_per_step: int
    estimated_step_s: float | None = None  # the allocator's estimate of a step on these PNodes and links


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


@recorded_as("session")
class CheckpointPruned(DomainEvent):
    type: Literal["CheckpointPruned"] = "CheckpointPruned"
    step: int


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
