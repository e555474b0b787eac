"""`session delete`: at once when nothing runs, at the next step boundary (after a stop) when it runs;
a deleted session takes no more commands, frees its owner's running slot and leaves the queue."""

from pathlib import Path

import pytest

from computeall.cli.main import build_parser
from computeall.protocol.commands import DeleteSession
from computeall.protocol.config import DataConfig, SessionConfig
from computeall.protocol.events import EventEnvelope, SessionFailed, SessionPaused
from computeall.protocol.session_commands import session_verbs
from computeall.protocol.session_state import Rejected, RunningSlots, SessionState
from computeall.protocol.session_status import TERMINAL, SessionStatus

NETWORK = (Path(__file__).resolve().parents[3] / "examples" / "networks" / "tiny-gpt.yaml").read_text()
CONFIG = SessionConfig(network_yaml=NETWORK, data=DataConfig(files=["corpus.txt"]), steps=12)


def record(state: SessionState, events: list) -> list[str]:
    for payload in events:
        state.apply(EventEnvelope(actor="alice", session_id=state.id, payload=payload), state.last_seq + 1)
    return [type(p).__name__ for p in events]


def created(start: bool = True, slots: RunningSlots = RunningSlots()) -> SessionState:
    state = SessionState(id="s1")
    record(state, state.create(CONFIG, owner="alice", start=start, slots=slots))
    return state


@pytest.mark.parametrize("ended", [SessionPaused(step=0), SessionFailed(reason="x")])
def test_a_session_that_does_not_run_is_deleted_at_once_and_once(ended):
    state = created()
    record(state, [ended])
    assert record(state, state.delete()) == ["SessionDeleted"]
    assert state.status == SessionStatus.DELETED and state.status in TERMINAL
    assert state.delete() == [], "a redelivered delete records nothing"
    for command in (state.start, state.resume, state.stop, state.pause):
        with pytest.raises(Rejected, match="session that is deleted"):
            command()


def test_a_running_session_stops_at_its_next_boundary_and_is_deleted_then():
    state = created()
    assert record(state, state.delete()) == ["StopRequested", "DeleteRequested"]
    assert state.status == SessionStatus.RUNNING and state.delete() == []
    assert [type(e).__name__ for e in state.at_boundary(5)] == ["SessionStopped", "SessionDeleted"]
    record(state, state.at_boundary(5))
    assert state.status == SessionStatus.DELETED


def test_a_stop_already_asked_is_not_asked_again():
    state = created()
    record(state, state.stop())
    assert record(state, state.delete()) == ["DeleteRequested"]
    assert [type(e).__name__ for e in state.at_boundary(3)] == ["SessionStopped", "SessionDeleted"]


def test_a_running_session_nobody_drives_is_deleted_by_the_claim():
    state = created()
    record(state, state.delete())
    assert [type(e).__name__ for e in state.claim("o2", takeover_from=None)] == ["SessionStopped", "SessionDeleted"]


def test_a_queued_session_leaves_the_queue():
    state = created(slots=RunningSlots(running=2, limit=2))
    assert state.status == SessionStatus.QUEUED
    record(state, state.delete())
    assert state.admit() == [], "a deleted session is not admitted when a slot frees"


def test_session_delete_is_a_cli_verb_waiting_for_its_effect():
    args = build_parser().parse_args(["session", "delete", "s1"])
    assert (args.verb, args.session_id) == ("delete", "s1")
    spec = session_verbs()["delete"]
    model, effects = spec.model, spec.effects
    assert model is DeleteSession and {e.__name__ for e in effects} == {"DeleteRequested", "SessionDeleted"}
