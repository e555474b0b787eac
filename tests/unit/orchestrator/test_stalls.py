"""Requests to PNodes once the bus lost messages: stalled after a deadline sized from what their kind
took lately, and only once a reconnect was seen; a PNode not listening for a moment is asked again."""

import asyncio

import nats.errors
import pytest

from computeall.orchestrator.errors import PNodeFailure, StepStalled
from computeall.orchestrator.pnode_calls import PNodeCalls
from computeall.orchestrator.pnodes import PNodeRegistry
from computeall.orchestrator.stalls import STALL_FACTOR, STALL_FLOOR_S, StallDeadlines
from computeall.protocol.pnode_api import PNodeReply, RunStep
from computeall.protocol.subjects import Subjects
from computeall.protocol.telemetry import Heartbeat


def beat(name: str, incarnation: str = "i", reconnects: int = 0) -> Heartbeat:
    return Heartbeat(pnode=name, host="h", os_pid=1, device="cpu", memory_bytes=1 << 30, ts=0.0,
                     incarnation=incarnation, reconnects=reconnects)


class Bus:
    """Answers a request to `answers` PNodes at once; the others' replies are lost (never come).
    `not_listening` requests first find nobody listening (a PNode reconnecting); `restarted` PNodes
    answer from a new process that holds no plan."""

    def __init__(self, answers: set[str], not_listening: int = 0, restarted: frozenset[str] = frozenset()) -> None:
        self.answers = answers
        self.not_listening = not_listening
        self.restarted = restarted
        self.asked = 0

    async def request(self, subject: str, data: bytes, timeout: float):
        self.asked += 1
        if self.not_listening:
            self.not_listening -= 1
            raise nats.errors.NoRespondersError
        pnode = subject.split(".")[-2]  # ca.pn.<pnode>.ctl
        if pnode in self.restarted:
            return type("Msg", (), {"data": PNodeReply.no_plan(pnode, "s").model_dump_json().encode()})
        if pnode not in self.answers:
            await asyncio.sleep(timeout)
            raise nats.errors.TimeoutError
        return type("Msg", (), {"data": PNodeReply(ok=True, pnode=pnode).model_dump_json().encode()})


def calls(bus: Bus) -> PNodeCalls:
    registry = PNodeRegistry()
    for p in ("p0", "p1"):
        registry.beat(beat(p))
    return PNodeCalls(bus, Subjects("ca"), registry)


def run_step(pnode: str) -> RunStep:
    return RunStep(session_id="s", step=3)


async def test_a_request_stalls_only_after_a_reconnect():
    c = calls(Bus(answers={"p0"}))
    with pytest.raises(asyncio.TimeoutError):  # no reconnect seen: it waits, as for a slow PNode
        await asyncio.wait_for(c.all(["p0", "p1"], run_step, stall_s=0.3), 1.0)
    c.registry.beat(beat("p1", reconnects=1))  # p1's server died; it reconnected to another
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    with pytest.raises(StepStalled, match="p1 did not answer"):
        await c.all(["p0", "p1"], run_step, stall_s=0.3)
    assert 0.3 <= loop.time() - t0 < 1.0


async def test_a_pnode_that_answers_from_a_new_process_is_lost_not_a_broken_session():
    """It restarted and answered before its new heartbeat came: its state is gone, so the session
    recovers without it (a `SessionError` would end the session)."""
    c = calls(Bus(answers={"p0"}, restarted=frozenset({"p1"})))
    with pytest.raises(PNodeFailure, match="restarted") as failure:
        await c.all(["p0", "p1"], run_step)
    assert failure.value.pnodes == ["p1"]


def test_a_restarted_pnode_is_no_reconnect():
    registry = PNodeRegistry()
    registry.beat(beat("p", "a", reconnects=2))
    registry.beat(beat("p", "b", reconnects=0))
    registry.beat(beat("p", "b", reconnects=0))
    assert registry.disturbed_at == float("-inf")
    registry.beat(beat("p", "b", reconnects=1))
    assert registry.disturbed_at > float("-inf")


async def test_a_pnode_reconnecting_is_asked_again_not_declared_dead():
    bus = Bus(answers={"p0"}, not_listening=2)
    c = calls(bus)
    reply = await c.one("p0", run_step("p0"))
    assert reply.ok and bus.asked == 3 and c.registry.is_live("p0")


def test_deadlines_follow_what_a_kind_took():
    deadlines = StallDeadlines()
    assert deadlines.seconds("RunStep") is None  # nothing measured: no early deadline
    for took in (0.1, 0.1, 5.0):
        deadlines.took("RunStep", took)
    assert deadlines.seconds("RunStep") == STALL_FLOOR_S  # the median: 4 x 0.1 s is under the floor
    for took in (3.0, 3.0):
        deadlines.took("RunStep", took)
    assert deadlines.seconds("RunStep") == STALL_FACTOR * 3.0
    deadlines.stalled("RunStep")
    deadlines.stalled("RunStep")
    assert deadlines.seconds("RunStep") == 4 * STALL_FACTOR * 3.0  # doubled at each stall in a row
    assert deadlines.seconds("ApplyStep") is None
    deadlines.took("RunStep", 3.0)
    assert deadlines.seconds("RunStep") == STALL_FACTOR * 3.0
