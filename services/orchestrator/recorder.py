"""Appends a session's events under its claim: the one way a driver changes a session.

Every append carries the session's expected sequence (`SessionLog`). When another writer
appended first, their events are folded in and the append is retried, as long as this
orchestrator still holds (or may still take) the claim.
"""

from __future__ import annotations

from pydantic import BaseModel

from computeall.protocol.eventlog import ConcurrencyError
from computeall.protocol.events import EventEnvelope, SessionClaimed
from computeall.protocol.session_log import SessionLog
from computeall.protocol.session_state import SessionState

from .errors import LostClaim


class SessionRecorder:
    def __init__(self, session: SessionLog, orchestrator_id: str, takeover_from: str | None) -> None:
        self.session = session
        self.orchestrator_id = orchestrator_id
        self.takeover_from = takeover_from  # the claimant we saw (None or a dead orchestrator)

    @property
    def state(self) -> SessionState:
        return self.session.state

    async def refresh(self) -> SessionState:
        """Fold what others recorded since (pause, stop and validation requests, a rival's claim)."""
        await self.session.refresh()
        return self.state

    async def record(self, payload: BaseModel) -> None:
        """Append an event; if others appended first, fold theirs and retry while we still hold the claim."""
        for _ in range(10):
            event = EventEnvelope(actor=f"orchestrator:{self.orchestrator_id}", session_id=self.state.id, payload=payload)
            try:
                await self.session.append(event)
                return
            except ConcurrencyError:
                await self.session.refresh()
                claimant = self.state.claimed_by
                if isinstance(payload, SessionClaimed):
                    if claimant not in (None, self.takeover_from, self.orchestrator_id):
                        raise LostClaim(f"session {self.state.id} was claimed by {claimant}") from None
                elif claimant != self.orchestrator_id:
                    raise LostClaim(f"session {self.state.id} is driven by {claimant}") from None
        raise LostClaim(f"session {self.state.id}: too many concurrent appends")

    async def events(self) -> list[BaseModel]:
        """The payloads of every event this session recorded, in log order (unknown types left out)."""
        out = []
        for record in await self.session.eventlog.read(self.session.eventlog.subjects.session_evt_all(self.state.id)):
            try:
                out.append(EventEnvelope.model_validate_json(record.data).payload)
            except ValueError:
                continue
        return out
