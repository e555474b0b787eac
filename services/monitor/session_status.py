"""A session's status as the monitor shows it: whatever the session fold (`SessionState.apply`) says.

The monitor keeps no rules of its own about which event moves a session where. It asks the fold,
once per event type, what status an event of that type leaves a new session in. That is the
status the event sets for any session, because a session event's effect on status depends on its
type alone; tests/unit/monitor/test_session_story.py checks it over a session's whole life.
"""

from __future__ import annotations

from pydantic import BaseModel

from computeall.protocol.events import EventEnvelope
from computeall.protocol.session_state import SessionState
from computeall.protocol.session_status import TERMINAL, SessionStatus

STATUSES: tuple[str, ...] = tuple(s.value for s in SessionStatus)
# a session the monitor has seen a CreateSession for, before (or instead of) SessionCreated
INITIAL: str = SessionState.model_fields["status"].default.value
ENDED: tuple[str, ...] = tuple(s.value for s in SessionStatus if s in TERMINAL)  # enum order: stable
# what lists and views leave out: sessions their owner deleted (the `events` table keeps their events)
HIDDEN: tuple[str, ...] = (SessionStatus.DELETED.value,)

_BY_TYPE: dict[type, str | None] = {}


def status_set_by(payload: BaseModel) -> str | None:
    """The status an event with this payload puts its session in; None when it leaves it alone."""
    kind = type(payload)
    if kind not in _BY_TYPE:
        probe = SessionState(id="probe")
        probe.apply(EventEnvelope(session_id=probe.id, payload=payload), 1)
        _BY_TYPE[kind] = None if probe.status == INITIAL else probe.status
    return _BY_TYPE[kind]
