"""A session has one driver at a time: resumed while the driver of its pause is still ending, the next
driver starts after it, and the ending one's cleanup does not make the session look driverless (the
orchestrator then started a third beside the second: their passes superseded each other's)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from computeall.orchestrator import service
from computeall.orchestrator.service import Orchestrator
from computeall.orchestrator.stalls import StallDeadlines
from computeall.protocol.credentials import Credential
from computeall.protocol.session_status import SessionStatus
from computeall.protocol.subjects import Subjects


class Driver:
    log: list[str] = []
    made = 0

    def __init__(self, *args, deadlines=None, **kwargs) -> None:
        Driver.made += 1
        self.name = f"driver {Driver.made}"
        self.ending = asyncio.Event()
        self.deadlines = deadlines
        self.state = SimpleNamespace(status=SessionStatus.PAUSED)

    async def run(self) -> None:
        Driver.log.append(f"{self.name} starts")
        await self.ending.wait()
        Driver.log.append(f"{self.name} ends")


async def test_a_resumed_sessions_driver_starts_once_the_paused_ones_ended(monkeypatch):
    monkeypatch.setattr(service, "SessionDriver", Driver)
    Driver.log, Driver.made = [], 0
    o = Orchestrator(Credential(role="orchestrator", name="o"), Subjects("test"))
    o.calls = None
    session = SimpleNamespace(state=SimpleNamespace(id="s", owner="alice"))
    o._drive(session)  # driving; then paused: it records the pause and is still ending
    await asyncio.sleep(0)
    pausing = o.driving["s"]
    o._drive(session)  # resumed meanwhile
    resumed = o.driving["s"]
    await asyncio.sleep(0.01)
    assert Driver.log == ["driver 1 starts"], "not beside the one still ending"
    pausing.ending.set()
    await asyncio.sleep(0.01)
    assert Driver.log == ["driver 1 starts", "driver 1 ends", "driver 2 starts"]
    assert "s" in o.drivers and o.driving["s"] is resumed, "the ending one's cleanup leaves the session driven"
    resumed.ending.set()
    await asyncio.sleep(0.01)
    assert "s" not in o.drivers and "s" not in o.driving


async def test_what_a_sessions_stalls_taught_outlives_its_drivers(monkeypatch):
    # a first pass slower than allowed loses the session's only PNode and pauses it for capacity, which ends
    # its driver: the next driver must allow twice as long, not begin again at what was too short
    monkeypatch.setattr(service, "SessionDriver", Driver)
    o = Orchestrator(Credential(role="orchestrator", name="o"), Subjects("test"))
    o.calls = None
    session = SimpleNamespace(state=SimpleNamespace(id="s", owner="alice"))
    o._drive(session)
    first = o.driving["s"]
    first.deadlines.stalled("RunStep")
    first.ending.set()
    await asyncio.sleep(0.01)
    o._drive(session)  # resumed for capacity
    second = o.driving["s"]
    assert second.deadlines is first.deadlines
    assert second.deadlines.allowance("RunStep").answer_s == 2 * StallDeadlines().allowance("RunStep").answer_s
    second.state.status = SessionStatus.COMPLETED
    second.ending.set()
    await asyncio.sleep(0.01)
    assert "s" not in o.deadlines, "an ended session's allowances are forgotten"
