"""The session aggregate: a session's state is a fold over its events, nothing else."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

from computeall.protocol.config import SessionConfig
from computeall.protocol.events import (
    Allocated,
    EventEnvelope,
    SessionCompleted,
    SessionCreated,
    SessionFailed,
    SessionStarted,
    StepCompleted,
)

Status = Literal["new", "created", "running", "completed", "failed"]


class SessionState(BaseModel):
    id: str
    status: Status = "new"
    owner: str | None = None
    config: SessionConfig | None = None
    next_step: int = 0
    last_loss: float | None = None
    last_seq: int = 0  # stream sequence of the newest event: the expected sequence of the next append
    allocation: dict[str, str] = {}

    def apply(self, event: EventEnvelope, seq: int) -> None:
        p = event.payload
        self.last_seq = max(self.last_seq, seq)
        if isinstance(p, SessionCreated):
            self.status, self.owner, self.config = "created", p.owner, p.config
        elif isinstance(p, SessionStarted):
            self.status = "running"
        elif isinstance(p, Allocated):
            self.allocation = {pl.vnode: pl.pnode for pl in p.placements}
        elif isinstance(p, StepCompleted):
            self.next_step, self.last_loss = p.step + 1, p.loss
        elif isinstance(p, SessionCompleted):
            self.status = "completed"
        elif isinstance(p, SessionFailed):
            self.status = "failed"


def fold(session_id: str, events: list[tuple[int, EventEnvelope]]) -> SessionState:
    state = SessionState(id=session_id)
    for seq, event in events:
        state.apply(event, seq)
    return state
