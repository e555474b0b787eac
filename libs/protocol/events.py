"""Domain events recorded in CA_LOG: sessions, PNodes and datasets.

Events are small (well under 1 MB): tensors never go into the log.
"""

from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import BaseModel, ConfigDict, Field

from .config import SessionConfig
from .envelope import Envelope


class _Event(BaseModel):
    model_config = ConfigDict(extra="forbid")


# -- sessions -----------------------------------------------------------------


class SessionCreated(_Event):
    type: Literal["SessionCreated"] = "SessionCreated"
    config: SessionConfig
    owner: str


class SessionStarted(_Event):
    type: Literal["SessionStarted"] = "SessionStarted"


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


class Allocated(_Event):
    type: Literal["Allocated"] = "Allocated"
    placements: list[VNodePlacement]
    edges: list[EdgeTraffic]
    pnodes: list[str]
    bytes_across_per_step: int


class StepCompleted(_Event):
    type: Literal["StepCompleted"] = "StepCompleted"
    step: int
    loss: float
    tokens: int
    step_time_s: float
    lr: float
    loss_scale: float = 1.0
    compute_s: float = 0.0
    wait_s: float = 0.0


class SessionCompleted(_Event):
    type: Literal["SessionCompleted"] = "SessionCompleted"
    steps: int
    final_loss: float | None


class SessionFailed(_Event):
    type: Literal["SessionFailed"] = "SessionFailed"
    reason: str


class CommandRejected(_Event):
    type: Literal["CommandRejected"] = "CommandRejected"
    command_id: str
    command_type: str
    reason: str


class SessionClaimed(_Event):
    """An orchestrator takes over driving the session (after start, resume or a crash)."""

    type: Literal["SessionClaimed"] = "SessionClaimed"
    orchestrator: str
    resume_from_step: int  # the step the driver continues from (a checkpoint's step, or 0)


class PauseRequested(_Event):
    type: Literal["PauseRequested"] = "PauseRequested"


class StopRequested(_Event):
    type: Literal["StopRequested"] = "StopRequested"


class ValidationRequested(_Event):
    type: Literal["ValidationRequested"] = "ValidationRequested"


class SessionPaused(_Event):
    type: Literal["SessionPaused"] = "SessionPaused"
    step: int  # the next step to run
    reason: str | None = None  # why, when the orchestrator paused it (not enough capacity)
    auto_resume: bool = False  # resumes by itself once the reason is gone


class SessionResumed(_Event):
    type: Literal["SessionResumed"] = "SessionResumed"
    fuse_heads: bool | None = None  # the session's head fusion from here on, when the resume changed it


class SessionStopped(_Event):
    type: Literal["SessionStopped"] = "SessionStopped"
    step: int


class CheckpointObject(BaseModel):
    vnode: str
    object: str  # name in the session's Object Store bucket
    digest: str  # blake2b-128 of the object's bytes
    bytes: int


class CheckpointCommitted(_Event):
    """The state after `step` steps; counts only once this event is in the log."""

    type: Literal["CheckpointCommitted"] = "CheckpointCommitted"
    step: int  # steps completed: training continues with step `step`
    bucket: str
    objects: list[CheckpointObject]
    seconds: float


class CheckpointPruned(_Event):
    type: Literal["CheckpointPruned"] = "CheckpointPruned"
    step: int


class ValidationCompleted(_Event):
    type: Literal["ValidationCompleted"] = "ValidationCompleted"
    step: int
    loss: float
    perplexity: float
    tokens: int


class LossScaleChanged(_Event):
    """The orchestrator changed the loss scale after `step` (it applies from step + 1)."""

    type: Literal["LossScaleChanged"] = "LossScaleChanged"
    step: int
    old: float
    new: float
    reason: Literal["overflow", "growth"]


class StepSkipped(_Event):
    """No PNode applied `step`'s update (its gradients overflowed somewhere); the step still counts."""

    type: Literal["StepSkipped"] = "StepSkipped"
    step: int
    reason: str


class PNodeLost(_Event):
    """A PNode the session used went silent for the heartbeat timeout (also recorded per PNode)."""

    type: Literal["PNodeLost"] = "PNodeLost"
    pnode: str
    step: int | None = None  # the step in flight, if any
    silent_s: float = 0.0


class PNodeSlow(_Event):
    type: Literal["PNodeSlow"] = "PNodeSlow"
    pnode: str
    step: int
    waited_s: float


class StepAborted(_Event):
    type: Literal["StepAborted"] = "StepAborted"
    step: int
    reason: str


class Reallocated(Allocated):
    """A new allocation after a PNode was lost, joined or left; the same fields as `Allocated`."""

    type: Literal["Reallocated"] = "Reallocated"  # type: ignore[assignment]
    reason: str
    moves: dict[str, str] = Field(default_factory=dict)  # vnode -> new pnode, for the VNodes that moved


class RolledBack(_Event):
    """Every PNode went back to the checkpoint at `to_step`; steps from there are re-run."""

    type: Literal["RolledBack"] = "RolledBack"
    to_step: int
    from_step: int  # the first step not yet recorded when the failure happened


SessionEvent = Annotated[
    Union[
        SessionCreated,
        SessionStarted,
        Allocated,
        StepCompleted,
        SessionCompleted,
        SessionFailed,
        CommandRejected,
        SessionClaimed,
        PauseRequested,
        StopRequested,
        ValidationRequested,
        SessionPaused,
        SessionResumed,
        SessionStopped,
        CheckpointCommitted,
        CheckpointPruned,
        ValidationCompleted,
        PNodeLost,
        PNodeSlow,
        StepAborted,
        Reallocated,
        RolledBack,
        LossScaleChanged,
        StepSkipped,
    ],
    Field(discriminator="type"),
]

# -- pnodes -------------------------------------------------------------------


class PNodeJoined(_Event):
    type: Literal["PNodeJoined"] = "PNodeJoined"
    pnode: str
    host: str
    os_pid: int
    device: str
    memory_bytes: int


class PNodeLeft(_Event):
    type: Literal["PNodeLeft"] = "PNodeLeft"
    pnode: str


PNodeEvent = Annotated[Union[PNodeJoined, PNodeLeft, PNodeLost], Field(discriminator="type")]

# -- datasets -----------------------------------------------------------------


class TokenizerTrained(_Event):
    """A dataset's tokenizer: trained on its corpus, or copied from `tokenizer_from`."""

    type: Literal["TokenizerTrained"] = "TokenizerTrained"
    name: str
    vocab_size: int  # the real size (training may stop below the requested size)
    requested_vocab_size: int
    tokenizer_digest: str
    tokenizer_from: str | None = None
    seconds: float


class Tokenized(_Event):
    type: Literal["Tokenized"] = "Tokenized"
    name: str
    documents: int
    text_bytes: int
    tokens: int
    dtype: str
    skipped_invalid_utf8: int = 0
    seconds: float


class SplitCreated(_Event):
    type: Literal["SplitCreated"] = "SplitCreated"
    name: str
    split: str
    method: str  # random-doc, tail, hash-doc
    documents: int
    tokens: int
    shards: int
    shard_digests: list[str]


class DatasetCreated(_Event):
    """Recorded last: a dataset exists (and is published) once this is in the log."""

    type: Literal["DatasetCreated"] = "DatasetCreated"
    name: str
    files: list[str]
    vocab_size: int
    documents: int
    tokens: int
    tokenizer_digest: str
    dtype: str = "uint16"
    splits: dict[str, int] = Field(default_factory=dict)  # split name -> tokens
    recipe_digest: str = ""
    object_store_bucket: str = ""


DatasetEvent = Annotated[
    Union[TokenizerTrained, Tokenized, SplitCreated, DatasetCreated], Field(discriminator="type")
]

Event = Annotated[
    Union[SessionEvent, PNodeEvent, DatasetEvent],
    Field(discriminator="type"),
]

EventEnvelope = Envelope[Event]
