"""The orchestrator's command handling is a thin mapping onto the session aggregate:
the events it returns are recorded, and a driver starts exactly when the session starts to run."""

from pathlib import Path

import pytest

from computeall.orchestrator import service
from computeall.protocol.credentials import Credential
from computeall.orchestrator.service import Orchestrator
from computeall.protocol.commands import (
    CommandEnvelope,
    CreateSession,
    PauseSession,
    ResumeSession,
    StartSession,
    StopSession,
    ValidateSession,
)
from computeall.protocol.config import DataConfig, SessionConfig
from computeall.protocol.eventlog import ConcurrencyError
from computeall.protocol.events import EventEnvelope, SessionPaused
from computeall.protocol.session_log import SessionLog
from computeall.protocol.session_state import Rejected
from computeall.protocol.subjects import Subjects

NETWORK = (Path(__file__).resolve().parents[3] / "examples" / "networks" / "tiny-gpt.yaml").read_text()


class MemoryEventLog:
    """The one call `SessionLog.append` makes, with JetStream's expected-sequence check."""

    subjects = Subjects("test")

    def __init__(self) -> None:
        self.events: list[EventEnvelope] = []

    async def append_session_event(self, event: EventEnvelope, expected_seq: int | None) -> int:
        if expected_seq is not None and expected_seq != len(self.events):
            raise ConcurrencyError(f"expected {expected_seq}, the log is at {len(self.events)}")
        self.events.append(event)
        return len(self.events)


@pytest.fixture
def orchestrator(monkeypatch):
    orchestrator = Orchestrator(Credential(role="orchestrator", name="orchestrator"), Subjects("test"))
    orchestrator.driven = []
    orchestrator.nc = None  # the dataset service is not asked here: `check_data` stands in for it
    orchestrator.data_checked = []
    monkeypatch.setattr(orchestrator, "_drive", lambda session, takeover_from=None: orchestrator.driven.append(session.state.id))

    async def check_data(nc, subjects, owner, data):
        orchestrator.data_checked.append((owner, data))
        if data.dataset == "not-hers":
            raise Rejected("data: no dataset named 'not-hers' is yours or public")

    monkeypatch.setattr(service, "check_data", check_data)
    return orchestrator


def config(network_yaml: str = NETWORK) -> SessionConfig:
    return SessionConfig(network_yaml=network_yaml, data=DataConfig(files=["corpus.txt"]), steps=10)


async def decide(orchestrator, session: SessionLog, payload) -> list[str]:
    """The event types one command recorded."""
    before = len(session.eventlog.events)
    await orchestrator._decide(session, CommandEnvelope(actor="alice", session_id="s1", payload=payload))
    return [e.payload.type for e in session.eventlog.events[before:]]


async def test_commands_record_the_aggregates_events_and_start_drivers(orchestrator):
    session = SessionLog(MemoryEventLog(), "s1")
    assert await decide(orchestrator, session, CreateSession(config=config(), start=False)) == ["SessionCreated"]
    assert orchestrator.driven == []
    assert await decide(orchestrator, session, CreateSession(config=config(), start=False)) == [], "a redelivery"
    assert await decide(orchestrator, session, StartSession()) == ["SessionStarted"]
    assert orchestrator.driven == ["s1"]
    assert await decide(orchestrator, session, PauseSession()) == ["PauseRequested"]
    assert await decide(orchestrator, session, ValidateSession()) == ["ValidationRequested"]
    await session.append(EventEnvelope(actor="orchestrator:o", session_id="s1", payload=SessionPaused(step=0)))
    assert await decide(orchestrator, session, ResumeSession(fuse_heads=False)) == ["SessionResumed"]
    assert orchestrator.driven == ["s1", "s1"] and session.state.fuse_heads is False
    assert await decide(orchestrator, session, StopSession()) == ["StopRequested"]
    assert orchestrator.driven == ["s1", "s1"]
    assert all(e.actor == "alice" and e.session_id == "s1" for e in session.eventlog.events if e.payload.type != "SessionPaused")


async def test_create_and_start_drives_at_once(orchestrator):
    session = SessionLog(MemoryEventLog(), "s1")
    assert await decide(orchestrator, session, CreateSession(config=config())) == ["SessionCreated", "SessionStarted"]
    assert orchestrator.driven == ["s1"]
    with pytest.raises(Rejected, match="cannot start a session that is running"):
        await decide(orchestrator, session, StartSession())


async def test_a_network_that_does_not_load_is_rejected_before_anything_is_recorded(orchestrator):
    session = SessionLog(MemoryEventLog(), "s1")
    cyclic = NETWORK.replace("{id: norm_f, op: rmsnorm, inputs: [b3.res2]}", "{id: norm_f, op: rmsnorm, inputs: [head]}")
    assert cyclic != NETWORK
    with pytest.raises(Rejected, match="cycle"):
        await decide(orchestrator, session, CreateSession(config=config(cyclic)))
    assert session.eventlog.events == [] and orchestrator.driven == []


async def test_a_create_whose_data_cannot_be_prepared_records_nothing(orchestrator):
    session = SessionLog(MemoryEventLog(), "s1")
    refused = config().model_copy(update={"data": DataConfig(dataset="not-hers")})
    with pytest.raises(Rejected, match="no dataset named 'not-hers'"):
        await decide(orchestrator, session, CreateSession(config=refused))
    assert session.eventlog.events == [] and orchestrator.driven == []
    assert orchestrator.data_checked == [("alice", refused.data)], "asked as the creator, before anything is recorded"
    assert await decide(orchestrator, session, CreateSession(config=config())) == ["SessionCreated", "SessionStarted"]
