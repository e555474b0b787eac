"""A standby orchestrator (what a machine that joined the bus runs) takes no commands and starts no queued
session while an active orchestrator heartbeats, nor before it had the time to hear one; once none has
for the heartbeat timeout it becomes active for good. It hears a standby's heartbeat as a standby's, and an
empty one (an orchestrator of before) as an active one's. Its takeover of a session whose driver died is
the claim every orchestrator makes: tests/integration/test_bus_machines.py."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

from computeall.orchestrator.service import Orchestrator
from computeall.protocol.credentials import Credential
from computeall.protocol.subjects import Subjects
from computeall.protocol.telemetry import OrchestratorBeat

S = Subjects("test")
TIMEOUT_S = 0.2


def orchestrator(standby: bool) -> Orchestrator:
    return Orchestrator(Credential(role="orchestrator", name="o"), S, heartbeat_timeout_s=TIMEOUT_S, standby=standby)


def hear(o: Orchestrator, peer: str, body: bytes) -> None:
    asyncio.run(o._on_peer_heartbeat(SimpleNamespace(subject=S.orchestrator_heartbeat(peer), data=body)))


def test_a_standby_stands_by_while_an_active_orchestrator_beats_then_takes_over_for_good():
    o = orchestrator(standby=True)
    assert o._standing_by(), "not before it had the time to hear the active one"
    hear(o, "active-1", OrchestratorBeat().model_dump_json().encode())
    o._started -= TIMEOUT_S
    assert o._standing_by()
    time.sleep(TIMEOUT_S * 1.5)  # the active one went silent
    hear(o, "standby-2", OrchestratorBeat(standby=True).model_dump_json().encode())  # another standby is no reason to wait
    assert not o._standing_by() and not o.standby
    hear(o, "active-1", b"")  # back (an empty beat is an active one's): this one stays active all the same
    assert not o._standing_by()


def test_an_active_orchestrator_never_stands_by_and_says_what_it_is():
    o = orchestrator(standby=False)
    assert not o._standing_by()
    assert OrchestratorBeat.model_validate_json(OrchestratorBeat(standby=o.standby).model_dump_json()).standby is False


def test_a_beat_that_does_not_parse_is_ignored():
    o = orchestrator(standby=True)
    hear(o, "odd", b"{not json")
    assert "odd" not in o.peers and "odd" not in o.active_peers
    hear(o, "empty", b"")
    assert "empty" in o.active_peers
