"""The orchestrator counts a PNode's memory at most at its credential's cap: the default until the
authority has answered, the answer afterwards, and PNodeJoined records what it may be given."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import nats.errors

from computeall.orchestrator.membership import MembershipRecorder, ask_authority
from computeall.orchestrator.pnodes import PNodeRegistry
from computeall.protocol.membership_api import DEFAULT_PNODE_MEMORY, MembershipReply
from computeall.protocol.subjects import Subjects
from computeall.protocol.telemetry import Heartbeat

PIB = 2**50


def beat(name: str, incarnation: str = "i", offered: int = PIB) -> Heartbeat:
    return Heartbeat(pnode=name, host="h", os_pid=1, device="cpu", memory_bytes=offered, ts=0.0, incarnation=incarnation)


class EventLog:
    def __init__(self) -> None:
        self.subjects = Subjects("ca")
        self.appended: list = []

    async def append_event(self, subject: str, event) -> None:
        self.appended.append((subject, event))


def test_a_pnode_counts_at_the_default_until_its_cap_is_known_and_at_its_cap_after():
    registry = PNodeRegistry()
    registry.beat(beat("p"))
    assert registry.memory_bytes(registry.heartbeat("p")) == DEFAULT_PNODE_MEMORY
    registry.admit("p", "i", 2 << 30)
    assert [c.memory_bytes for c in registry.capacities()] == [2 << 30]
    registry.beat(beat("p", incarnation="new"))  # a new process: its cap is asked again
    assert registry.memory_bytes(registry.heartbeat("p")) == DEFAULT_PNODE_MEMORY
    registry.beat(beat("q", offered=1 << 30))
    registry.admit("q", "i", 2 << 30)
    assert registry.memory_bytes(registry.heartbeat("q")) == 1 << 30, "an offer under the cap stands"


async def test_joined_records_the_cap_with_the_claim_beside_it():
    registry, log = PNodeRegistry(), EventLog()
    asked = []

    async def cap(pnode: str) -> int:
        asked.append(pnode)
        return 2 << 30

    recorder = MembershipRecorder(log, "orchestrator:o", registry, cap)
    for _ in range(3):  # every heartbeat of the same process: asked and recorded once
        registry.beat(beat("p"))
        recorder.beat(beat("p"))
    await asyncio.gather(*recorder._pending)
    assert asked == ["p"]
    ((subject, event),) = log.appended
    assert subject == "ca.evt.pnode.p.PNodeJoined"
    assert (event.payload.memory_bytes, event.payload.offered_bytes) == (2 << 30, PIB)
    assert [c.memory_bytes for c in registry.capacities()] == [2 << 30]


async def test_without_an_authority_the_default_cap_applies():
    class NoAuthority:
        async def request(self, subject, data, timeout):
            raise nats.errors.NoRespondersError

    class Authority:
        async def request(self, subject, data, timeout):
            assert subject == "ca.sec.pnode.memory"
            return SimpleNamespace(data=MembershipReply(memory_bytes=5 << 30).model_dump_json().encode())

    assert await ask_authority(NoAuthority(), Subjects("ca"))("p") == DEFAULT_PNODE_MEMORY
    assert await ask_authority(Authority(), Subjects("ca"))("p") == 5 << 30
