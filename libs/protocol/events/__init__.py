"""Domain events recorded in CA_LOG: sessions, PNodes and datasets, one module per family.

Events are small (well under 1 MB): tensors never go into the log. Each event type is one
class registered with `@recorded_as(...)` (`base.py`); the unions below are built from
those registrations.
"""

from __future__ import annotations

from ..envelope import Envelope
from .base import DomainEvent, recorded_as, union_of
from .dataset import DatasetCreated, DatasetShared, SplitCreated, TokenizerTrained, Tokenized
from .failover import PNodeSlow, Reallocated, RolledBack, StepAborted
from .membership import PNodeJoined, PNodeLeft, PNodeLost
from .session import (
    CommandRejected,
    DeleteRequested,
    PauseRequested,
    SessionClaimed,
    SessionCompleted,
    SessionCreated,
    SessionDeleted,
    SessionFailed,
    SessionPaused,
    SessionQueued,
    SessionResumed,
    SessionStarted,
    SessionStopped,
    StopRequested,
    ValidationRequested,
)
from .training import (
    Allocated,
    CheckpointCommitted,
    CheckpointDiscarded,
    CheckpointObject,
    CheckpointPruned,
    EdgeTraffic,
    InitializedFrom,
    LossScaleChanged,
    Sample,
    SamplesGenerated,
    StepCompleted,
    StepSkipped,
    UpdateRatios,
    ValidationCompleted,
    VNodePlacement,
)
from .verification import (
    CheckOutcome,
    ChecksCompleted,
    PNodeQuarantined,
    ResultsDiscarded,
    VerificationFailed,
    VerificationSeeded,
    standing,
)

SessionEvent = union_of("session")
PNodeEvent = union_of("pnode")
DatasetEvent = union_of("dataset")
Event = union_of("session", "pnode", "dataset")
EventEnvelope = Envelope[Event]

__all__ = [
    "Allocated", "CheckOutcome", "ChecksCompleted", "CheckpointCommitted", "CheckpointDiscarded", "CheckpointObject",
    "CheckpointPruned", "CommandRejected",
    "DatasetCreated", "DeleteRequested", "DatasetEvent", "DatasetShared", "DomainEvent", "EdgeTraffic", "Event", "EventEnvelope",
    "InitializedFrom", "LossScaleChanged", "PNodeEvent", "PNodeJoined", "PNodeLeft", "PNodeLost", "PNodeQuarantined",
    "PNodeSlow", "PauseRequested", "Reallocated", "ResultsDiscarded", "RolledBack", "Sample", "SamplesGenerated",
    "SessionClaimed", "SessionCompleted",
    "SessionCreated", "SessionDeleted", "SessionEvent", "SessionFailed", "SessionPaused", "SessionQueued", "SessionResumed",
    "SessionStarted", "SessionStopped", "SplitCreated", "StepAborted", "StepCompleted",
    "StepSkipped", "StopRequested", "TokenizerTrained", "Tokenized", "UpdateRatios", "ValidationCompleted",
    "ValidationRequested", "VerificationFailed", "VerificationSeeded", "VNodePlacement", "recorded_as", "standing",
]
