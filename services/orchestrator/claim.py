"""Taking a session to drive: only when it is running and nobody else (alive) drives it."""

from __future__ import annotations

from computeall.protocol.events import SessionClaimed, SessionPaused, SessionStopped

from .recorder import SessionRecorder


async def claim(recorder: SessionRecorder) -> bool:
    """Record `SessionClaimed`; False when there is nothing to drive (finished, claimed by another
    orchestrator first, or a stop or pause asked while nobody drove it, now recorded)."""
    state = await recorder.refresh()
    if state.status != "running" or state.claimed_by != recorder.takeover_from:
        return False
    at = state.last_checkpoint.step if state.last_checkpoint else 0
    if state.stop_requested:  # nobody drove the session since: the last checkpoint stands
        await recorder.record(SessionStopped(step=at))
        return False
    if state.pause_requested:
        await recorder.record(SessionPaused(step=at))
        return False
    await recorder.record(SessionClaimed(orchestrator=recorder.orchestrator_id, resume_from_step=at))
    return True
