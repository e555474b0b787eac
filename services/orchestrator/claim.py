"""Taking a session to drive: only when it is running and nobody else (alive) drives it."""

from __future__ import annotations

from computeall.protocol.events import SessionClaimed

from .recorder import SessionRecorder


async def claim(recorder: SessionRecorder) -> bool:
    """Record what the aggregate decides; True when this orchestrator now drives the session
    (False: it ended meanwhile, a rival claimed it first, or a pending stop or pause ended it)."""
    state = await recorder.refresh()
    events = state.claim(recorder.orchestrator_id, recorder.takeover_from)
    for event in events:
        await recorder.record(event)
    return any(isinstance(e, SessionClaimed) for e in events)
