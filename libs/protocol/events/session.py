"""A session's life: created, claimed, paused, resumed, stopped, completed, failed; refused commands."""

from __future__ import annotations

from typing import Literal

from ..config import SessionConfig
from .base import DomainEvent, recorded_as


@recorded_as("session")
class SessionCreated(DomainEvent):
    type: Literal["SessionCreated"] = "SessionCreated"
    config: SessionConfig
    owner: str


@recorded_as("session")
class SessionStarted(DomainEvent):
    type: Literal["SessionStarted"] = "SessionStarted"


@recorded_as("session")
class SessionQueued(DomainEvent):
    """Asked to run (create, start or resume) while its owner runs as many sessions as a user may:
    it starts (`SessionStarted`) once one of them ends or pauses."""

    type: Literal["SessionQueued"] = "SessionQueued"
    reason: str  # e.g. "alice has 2 sessions running (limit 2)"
    fuse_heads: bool | None = None  # a queued resume's head fusion, as `SessionResumed.fuse_heads`


@recorded_as("session")
class SessionClaimed(DomainEvent):
    """An orchestrator takes over driving the session (after start, resume or a crash)."""

    type: Literal["SessionClaimed"] = "SessionClaimed"
    orchestrator: str
    resume_from_step: int  # the step the driver continues from (a checkpoint's step, or 0)


@recorded_as("session")
class PauseRequested(DomainEvent):
    type: Literal["PauseRequested"] = "PauseRequested"


@recorded_as("session")
class StopRequested(DomainEvent):
    type: Literal["StopRequested"] = "StopRequested"


@recorded_as("session")
class ValidationRequested(DomainEvent):
    type: Literal["ValidationRequested"] = "ValidationRequested"


@recorded_as("session")
class SessionPaused(DomainEvent):
    type: Literal["SessionPaused"] = "SessionPaused"
    step: int  # the next step to run
    reason: str | None = None  # why, when the orchestrator paused it (not enough capacity)
    auto_resume: bool = False  # resumes by itself once the reason is gone


@recorded_as("session")
class SessionResumed(DomainEvent):
    type: Literal["SessionResumed"] = "SessionResumed"
    fuse_heads: bool | None = None  # the session's head fusion from here on, when the resume changed it


@recorded_as("session")
class DeleteRequested(DomainEvent):
    """Its owner deleted the session while it ran: it stops at the next step boundary, then is deleted."""

    type: Literal["DeleteRequested"] = "DeleteRequested"


@recorded_as("session")
class SessionDeleted(DomainEvent):
    """Its owner deleted the session: lists and views leave it out; its events stay in the log."""

    type: Literal["SessionDeleted"] = "SessionDeleted"


@recorded_as("session")
class SessionStopped(DomainEvent):
    type: Literal["SessionStopped"] = "SessionStopped"
    step: int


@recorded_as("session")
class SessionCompleted(DomainEvent):
    type: Literal["SessionCompleted"] = "SessionCompleted"
    steps: int
    final_loss: float | None


@recorded_as("session")
class SessionFailed(DomainEvent):
    type: Literal["SessionFailed"] = "SessionFailed"
    reason: str


@recorded_as("session")
class CommandRejected(DomainEvent):
    type: Literal["CommandRejected"] = "CommandRejected"
    command_id: str
    command_type: str
    reason: str
