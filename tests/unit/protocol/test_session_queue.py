"""A session asked to run while its owner runs as many as a user may: queued, with the reason,
until the orchestrator admits it; a queued session can be stopped, not paused or started twice."""

from pathlib import Path

import pytest

from computeall.protocol.config import DataConfig, SessionConfig
from computeall.protocol.events import EventEnvelope, SessionPaused
from computeall.protocol.session_state import Rejected, RunningSlots, SessionState
from computeall.protocol.session_status import SessionStatus

NETWORK = (Path(__file__).resolve().parents[3] / "examples" / "networks" / "tiny-gpt.yaml").read_text()
CONFIG = SessionConfig(network_yaml=NETWORK, data=DataConfig(files=["corpus.txt"]), steps=12)
FULL, FREE = RunningSlots(running=2, limit=2), RunningSlots(running=1, limit=2)


def record(state: SessionState, events: list) -> list[str]:
    for payload in events:
        state.apply(EventEnvelope(actor="alice", session_id=state.id, payload=payload), state.last_seq + 1)
    return [type(p).__name__ for p in events]


def test_a_create_beyond_the_limit_is_queued_with_the_reason_and_admitted_later():
    state = SessionState(id="s1")
    assert record(state, state.create(CONFIG, owner="alice", slots=FULL)) == ["SessionCreated", "SessionQueued"]
    assert state.status == SessionStatus.QUEUED
    assert state.queue_reason == "alice has 2 sessions running (limit 2)"
    with pytest.raises(Rejected, match="cannot start a session that is queued"):
        state.start(FREE)
    with pytest.raises(Rejected, match="cannot pause a session that is queued"):
        state.pause()
    assert record(state, state.admit()) == ["SessionStarted"]
    assert state.status == SessionStatus.RUNNING and state.queue_reason is None
    assert state.admit() == [], "only a queued session is admitted"


def test_under_the_limit_a_session_runs_at_once():
    state = SessionState(id="s1")
    assert record(state, state.create(CONFIG, owner="alice", slots=FREE)) == ["SessionCreated", "SessionStarted"]
    created = SessionState(id="s2")
    record(created, created.create(CONFIG, owner="alice", start=False, slots=FULL))
    assert created.status == SessionStatus.CREATED, "a create that does not start takes no slot"
    assert record(created, created.start(FULL)) == ["SessionQueued"]


def test_a_resume_beyond_the_limit_queues_and_keeps_its_fusion_setting():
    state = SessionState(id="s1")
    record(state, state.create(CONFIG, owner="alice", slots=FREE))
    record(state, [SessionPaused(step=0, reason="not enough capacity: x", auto_resume=True)])
    assert record(state, state.resume(fuse_heads=False, slots=FULL)) == ["SessionQueued"]
    assert state.fuse_heads is False and state.pause_reason is None and not state.waits_for_capacity
    assert state.resume_for_capacity() == [], "a queued session is started by admission, not as a capacity resume"
    record(state, state.admit())
    assert state.status == SessionStatus.RUNNING


def test_a_queued_session_can_be_stopped():
    state = SessionState(id="s1")
    record(state, state.create(CONFIG, owner="alice", slots=FULL))
    assert record(state, state.stop()) == ["SessionStopped"]
    assert state.status == SessionStatus.STOPPED and state.queue_reason is None
    assert state.admit() == []
