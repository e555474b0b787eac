"""One session's aggregate kept current from CA_LOG: refreshed by folding what was recorded since,
appended to with the expected sequence (optimistic concurrency: a stale writer gets `ConcurrencyError`)."""

from __future__ import annotations

from .eventlog import EventLog
from .events import EventEnvelope, SessionEvent
from .session_state import SessionState


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

    async def record(self, actor: str, events: list[SessionEvent]) -> None:
        """Append what a command returned, in order, each in its envelope."""
        for payload in events:
            await self.append(EventEnvelope(actor=actor, session_id=self.state.id, payload=payload))
