"""A bus that stays unavailable past a read's patience is the bus's failure, not the session's: the
driver ends without recording `SessionFailed`, and the orchestrator takes the session up again from
its log (its own claim included) once the log answers. A bug still fails the session visibly."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace

import nats.errors
import pytest

from computeall.orchestrator.driver import SessionDriver
from computeall.orchestrator.pnodes import PNodeRegistry
from computeall.orchestrator.service import Orchestrator
from computeall.protocol.bus_failover import BusUnavailable
from computeall.protocol.config import DataConfig, SessionConfig
from computeall.protocol.credentials import Credential
from computeall.protocol.events import EventEnvelope, SessionFailed
from computeall.protocol.session_log import SessionLog
from computeall.protocol.session_status import SessionStatus
from computeall.protocol.subjects import Subjects

NETWORK = (Path(__file__).resolve().parents[3] / "examples" / "networks" / "tiny-gpt.yaml").read_text()
S = Subjects("test")


class UnreadableLog:
    """Appends are kept; every read fails with `failure` (None: nothing new)."""

    subjects = S

    def __init__(self, failure: BaseException | None) -> None:
        self.failure = failure
        self.appended: list[EventEnvelope] = []

    async def read(self, filter_subject: str, start_seq: int = 1, **_) -> list:
        if self.failure is not None:
            raise self.failure
        return []

    async def append_session_event(self, event: EventEnvelope, expected_seq: int | None) -> int:
        self.appended.append(event)
        return 1000 + len(self.appended)


def running(log: UnreadableLog, claimed_by: str | None) -> SessionLog:
    """Session s1, running, driven by `claimed_by` (None: nobody yet)."""
    session = SessionLog(log, "s1")
    config = SessionConfig(network_yaml=NETWORK, data=DataConfig(files=["corpus.txt"]), steps=10)
    events = session.state.create(config, owner="alice", start=True)
    if claimed_by:
        for e in events:
            session.state.apply(EventEnvelope(actor="alice", session_id="s1", payload=e), session.state.last_seq + 1)
        events = session.state.claim(claimed_by, None)
    for e in events:
        session.state.apply(EventEnvelope(actor="o", session_id="s1", payload=e), session.state.last_seq + 1)
    assert session.state.status == SessionStatus.RUNNING and session.state.claimed_by == claimed_by
    return session


def driver(session: SessionLog) -> SessionDriver:
    return SessionDriver(calls=SimpleNamespace(nc=None), subjects=S, session=session, registry=PNodeRegistry(10.0), orchestrator_id="o1",
                         jobs=None)


async def test_a_bus_unavailable_past_the_patience_does_not_fail_the_session():
    unavailable = BusUnavailable("reading test.evt.session.s1.>", 30.0, nats.errors.TimeoutError())
    log = UnreadableLog(unavailable)
    await driver(running(log, claimed_by=None)).run()
    assert log.appended == [], "nothing recorded: no SessionFailed for a bus that was failing over"


async def test_a_bug_still_fails_the_session_visibly():
    log = UnreadableLog(RuntimeError("a bug"))
    await driver(running(log, claimed_by=None)).run()
    assert [type(e.payload) for e in log.appended] == [SessionFailed]
    assert log.appended[0].payload.reason == "internal error: RuntimeError: a bug"


@pytest.mark.parametrize("claimant", ["ours", "a live peer"])
async def test_a_running_session_of_ours_without_a_driver_is_driven_again(monkeypatch, claimant):
    orchestrator = Orchestrator(Credential(role="orchestrator", name="orchestrator"), S, heartbeat_timeout_s=0.01)
    orchestrator.peers["peer"] = float("inf")  # heard from just now, for ever
    driven = []
    monkeypatch.setattr(orchestrator, "_drive", lambda session, takeover_from=None: driven.append(takeover_from))
    claimed_by = orchestrator.id if claimant == "ours" else "peer"
    orchestrator.sessions["s1"] = running(UnreadableLog(None), claimed_by=claimed_by)
    adopting = asyncio.create_task(orchestrator._adopt_orphans())
    await asyncio.sleep(0.3)
    adopting.cancel()
    assert driven[:1] == ([orchestrator.id] if claimant == "ours" else []), "a live peer's session stays its own"
