"""Refusing a forged or stray command costs O(1): the orchestrator decides it from memory (the
subject's user, the owners it learned from `SessionCreated`, an ended session's cached state) and
never reads the log for it; a user over the command rate is refused unread, one record per burst."""

import asyncio

import pytest

from computeall.orchestrator.lanes import Lanes
from computeall.orchestrator.reads import SessionReads
from computeall.orchestrator.service import Orchestrator
from computeall.protocol.commands import CommandEnvelope, PauseSession, StartSession
from computeall.protocol.config import DataConfig, SessionConfig
from computeall.protocol.credentials import Credential
from computeall.protocol.events import CommandRejected, EventEnvelope, SessionCompleted, SessionCreated, SessionStarted
from computeall.protocol.fair_share import FairShareLimits
from computeall.protocol.limits import COMMAND_BYTES
from computeall.protocol.subjects import Subjects

S = Subjects("test")
CONFIG = SessionConfig(network_yaml="name: t\n", data=DataConfig(files=["a"]), steps=9)


class CountingLog:
    """The event log the orchestrator sees: every read counted, every append kept."""

    subjects = S

    def __init__(self) -> None:
        self.reads: list[str] = []
        self.appended: list[EventEnvelope] = []

    async def read(self, filter_subject: str, start_seq: int = 1, **_) -> list:
        self.reads.append(filter_subject)
        return []

    async def append_session_event(self, event: EventEnvelope, expected_seq: int | None) -> int:
        self.appended.append(event)
        return len(self.appended) + 100

    def rejections(self) -> list[str]:
        return [e.payload.reason for e in self.appended if isinstance(e.payload, CommandRejected)]


class Msg:
    def __init__(self, sender: str, sid: str, data: bytes, command_id: str = "c") -> None:
        self.subject, self.data, self.headers = S.session_cmd(sid, sender), data, {"Nats-Msg-Id": command_id}
        self.acked = False

    async def ack(self) -> None:
        self.acked = True


def command(sid: str, payload, actor: str = "mallory", session_id: str | None = None) -> bytes:
    return CommandEnvelope(actor=actor, session_id=session_id or sid, payload=payload).model_dump_json().encode()


@pytest.fixture
def orchestrator():
    orchestrator = Orchestrator(Credential(role="orchestrator", name="orchestrator"), S,
                                limits=FairShareLimits(commands_per_second_per_user=1, command_burst_per_user=5))
    orchestrator.eventlog = CountingLog()
    orchestrator.reads = SessionReads(None, orchestrator.eventlog, S)
    for sid, owner, *events in (("alices", "alice", SessionStarted()),
                                ("done", "mallory", SessionStarted(), SessionCompleted(steps=9, final_loss=1.0))):
        session = orchestrator._know(sid, owner)  # as learned from its SessionCreated
        for seq, payload in enumerate([SessionCreated(config=CONFIG, owner=owner), *events], 1):
            session.state.apply(EventEnvelope(session_id=sid, payload=payload), seq)
    return orchestrator


FORGED = {
    "a forged actor": (Msg("mallory", "m1", command("m1", StartSession(), actor="alice")),
                       "the command says it is from 'alice', but user 'mallory' sent it"),
    "a mismatched session id": (Msg("mallory", "alices", command("alices", StartSession(), session_id="m1")),
                                "session_id 'm1' does not match the subject"),
    "a malformed command": (Msg("mallory", "m1", b'{"id": "x", "payload": {"type": "Nope"'), "malformed command"),
    "an oversized command": (Msg("mallory", "m1", b" " * (COMMAND_BYTES + 1)), "a command may have at most"),
    "a session never created": (Msg("mallory", "nope", command("nope", StartSession())),
                                "user mallory has no session nope"),
    "another user's session": (Msg("mallory", "alices", command("alices", PauseSession())),
                               "session alices belongs to another user"),
    "an ended session": (Msg("mallory", "done", command("done", StartSession())),
                         "cannot start a session that is completed"),
}


@pytest.mark.parametrize("case", FORGED)
async def test_a_forged_or_stray_command_is_refused_without_reading_the_log(orchestrator, case):
    msg, reason = FORGED[case]
    await orchestrator._handle_command(msg)
    log = orchestrator.eventlog
    assert len(log.rejections()) == 1 and reason in log.rejections()[0], log.rejections()
    assert log.reads == [], f"{case}: refused after reading {log.reads}"


async def test_a_command_the_owner_may_give_is_decided_on_the_log(orchestrator):
    """The control: the counting log does see the read a real decision makes."""
    await orchestrator._handle_command(Msg("alice", "alices", command("alices", PauseSession(), actor="alice")))
    log = orchestrator.eventlog
    assert log.reads == [S.session_evt_all("alices")]
    assert [e.payload.type for e in log.appended] == ["PauseRequested"]


async def test_a_flood_over_the_rate_is_refused_unread_and_recorded_once(orchestrator):
    lanes = Lanes()
    flood = [Msg("mallory", f"m{i}", command(f"m{i}", StartSession()), command_id=f"c{i}") for i in range(2000)]
    refused = [await orchestrator._over_rate(msg, lanes) for msg in flood]
    while lanes._running:
        await asyncio.sleep(0)
    assert refused == [False] * 5 + [True] * 1995, "the burst is taken, the rest refused"
    assert all(msg.acked for msg in flood[5:]), "a refused command is acknowledged: it never comes back"
    log = orchestrator.eventlog
    assert len(log.appended) == 1 and log.appended[0].session_id == "m5" and log.appended[0].payload.command_id == "c5"
    assert "user mallory sends commands faster than 1 per second (5 at once)" in log.rejections()[0]
    assert log.reads == []
    assert not await orchestrator._over_rate(Msg("alice", "alices", b"{}"), lanes), "another user is not held up"
