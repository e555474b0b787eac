"""A session's state as a fold over its events: the aggregate the orchestrator drives and clients read.

Nothing about a session is kept anywhere else: the orchestrator rebuilds this from CA_LOG
after any crash, and `computeall session show` folds the same events.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

from .config import SessionConfig
from .eventlog import EventLog
from .events import (
    Allocated,
    CheckpointCommitted,
    CheckpointPruned,
    EventEnvelope,
    PauseRequested,
    SessionClaimed,
    SessionCompleted,
    SessionCreated,
    SessionFailed,
    SessionPaused,
    SessionResumed,
    SessionStarted,
    SessionStopped,
    StepCompleted,
    StopRequested,
    ValidationCompleted,
    ValidationRequested,
)

Status = Literal["new", "created", "running", "paused", "stopped", "completed", "failed"]
TERMINAL = ("stopped", "completed", "failed")


class SessionState(BaseModel):
    id: str
    status: Status = "new"
    owner: str | None = None
    config: SessionConfig | None = None
    next_step: int = 0  # the first step not yet recorded as completed
    last_loss: float | None = None
    last_seq: int = 0  # stream sequence of the newest event: the expected sequence of the next append
    claimed_by: str | None = None
    pause_requested: bool = False
    stop_requested: bool = False
    validation_requested: bool = False
    checkpoints: list[CheckpointCommitted] = []  # committed and not pruned, oldest first
    allocation: dict[str, str] = {}
    failure: str | None = None
    pause_reason: str | None = None
    auto_resume: bool = False  # paused by the orchestrator (capacity), resumes by itself
    fuse_heads: bool = True  # the config's setting, or the last resume's that changed it

    @property
    def last_checkpoint(self) -> CheckpointCommitted | None:
        return self.checkpoints[-1] if self.checkpoints else None

    def apply(self, event: EventEnvelope, seq: int) -> None:
        p = event.payload
        self.last_seq = max(self.last_seq, seq)
        if isinstance(p, SessionCreated):
            self.status, self.owner, self.config = "created", p.owner, p.config
            self.fuse_heads = p.config.fuse_heads
        elif isinstance(p, SessionStarted):
            self.status = "running"
        elif isinstance(p, SessionClaimed):
            self.claimed_by = p.orchestrator
        elif isinstance(p, Allocated):
            self.allocation = {pl.vnode: pl.pnode for pl in p.placements}
        elif isinstance(p, StepCompleted):
            self.next_step, self.last_loss = max(self.next_step, p.step + 1), p.loss
        elif isinstance(p, PauseRequested):
            self.pause_requested = True
        elif isinstance(p, StopRequested):
            self.stop_requested = True
        elif isinstance(p, ValidationRequested):
            self.validation_requested = True
        elif isinstance(p, ValidationCompleted):
            self.validation_requested = False
        elif isinstance(p, SessionPaused):
            self.status, self.pause_requested, self.claimed_by = "paused", False, None
            self.pause_reason, self.auto_resume = p.reason, p.auto_resume
        elif isinstance(p, SessionResumed):
            self.status, self.pause_reason, self.auto_resume = "running", None, False
            if p.fuse_heads is not None:
                self.fuse_heads = p.fuse_heads
        elif isinstance(p, SessionStopped):
            self.status, self.claimed_by = "stopped", None
        elif isinstance(p, CheckpointCommitted):
            self.checkpoints.append(p)
        elif isinstance(p, CheckpointPruned):
            self.checkpoints = [c for c in self.checkpoints if c.step != p.step]
        elif isinstance(p, SessionCompleted):
            self.status, self.claimed_by = "completed", None
        elif isinstance(p, SessionFailed):
            self.status, self.claimed_by, self.failure = "failed", None, p.reason


def fold(session_id: str, events: list[tuple[int, EventEnvelope]]) -> SessionState:
    state = SessionState(id=session_id)
    for seq, event in events:
        state.apply(event, seq)
    return state


class SessionLog:
    """One session's state kept current from CA_LOG, and appends that keep it current."""

    def __init__(self, eventlog: EventLog, session_id: str) -> None:
        self.eventlog = eventlog
        self.state = SessionState(id=session_id)
        self.skipped = 0  # events this build cannot read (a newer schema): counted, not fatal

    async def refresh(self) -> SessionState:
        """Fold every event recorded after the last one seen."""
        subject = self.eventlog.subjects.session_evt_all(self.state.id)
        for record in await self.eventlog.read(subject, start_seq=self.state.last_seq + 1):
            try:
                event = EventEnvelope.model_validate_json(record.data)
            except ValueError:
                self.skipped += 1
                self.state.last_seq = max(self.state.last_seq, record.seq)
                continue
            self.state.apply(event, record.seq)
        return self.state

    async def append(self, event: EventEnvelope) -> None:
        """Append with the expected sequence of what this log has seen; `ConcurrencyError` when stale."""
        seq = await self.eventlog.append_session_event(event, self.state.last_seq)
        self.state.apply(event, seq)
