"""Sessions on an embedded cluster, as the benchmarks run and time them.

A step's time is the wall time between two recorded steps (`step_walls`): everything the system
does for a step is in it, the orchestrator's requests, the bus, appending the step's events. The
`step_time_s` a StepCompleted carries leaves the recording out and flatters the system.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from pydantic import TypeAdapter

from computeall.cli.client import Client, connect
from computeall.cli.data_upload import with_sent_data
from computeall.cli.default_corpus import stdlib_files
from computeall.cli.follow import follow_session, start_session
from computeall.cli.session_view import session_events
from computeall.cli.supervisor import Supervisor
from computeall.protocol import bus
from computeall.protocol.config import SessionConfig
from computeall.protocol.eventlog import EventLog
from computeall.protocol.events import EventEnvelope, StepCompleted
from computeall.protocol.session_state import SessionState, fold
from computeall.protocol.subjects import TEL_STREAM, Subjects
from computeall.protocol.telemetry import Heartbeat, StepTiming, Telemetry

from .common import REPO

# the shared data folder beside the checkout, or beside its worktree folder
SHAKESPEARE = next((p / "shared" / "data" / "tinyshakespeare.txt" for p in REPO.parents
                    if (p / "shared" / "data" / "tinyshakespeare.txt").exists()), None)


def corpus() -> list[str]:
    """Tiny Shakespeare where the shared data folder has it, else a megabyte of the stdlib's sources."""
    return [str(SHAKESPEARE)] if SHAKESPEARE else stdlib_files(1 << 20)


def shakespeare() -> Path:
    """For figures that need the real corpus (the loss of a wire format)."""
    if SHAKESPEARE is None:
        raise SystemExit("tiny-shakespeare not found in a shared/data folder beside the checkout; these figures need it")
    return SHAKESPEARE


def small_corpus() -> list[str]:
    return stdlib_files(300_000)


async def run_to_end(client: Client, config: SessionConfig, timeout: float = 3600.0) -> str:
    """Upload the data as `computeall run` does, start the session and wait for its end; its id."""
    config = await with_sent_data(client, config, progress=False)
    sid, command_id = await start_session(client, config)
    outcome = await asyncio.wait_for(follow_session(client, sid, config.steps, progress=False, command_id=command_id),
                                     timeout)
    if not outcome.ok:
        raise SystemExit(f"session {sid}: {outcome.message}")
    return sid


def recorded_steps(events: list[tuple[int, EventEnvelope]]) -> list[EventEnvelope]:
    return [e for _, e in events if isinstance(e.payload, StepCompleted)]


def step_walls(events: list[tuple[int, EventEnvelope]]) -> list[float]:
    """Seconds from each recorded step to the next: interval i ends with step i + 1's record."""
    steps = recorded_steps(events)
    return [b.ts - a.ts for a, b in zip(steps, steps[1:])]


async def state(client: Client, sid: str) -> SessionState:
    return fold(sid, await session_events(client, sid))


async def wait_until(condition: Callable[[], Awaitable[object]], timeout: float, what: str, interval: float = 0.3):
    """The first truthy value of `condition()`; TimeoutError naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not (value := await condition()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout:.0f} s")
        await asyncio.sleep(interval)
    return value


async def wait_for(client: Client, sid: str, predicate: Callable[[SessionState], bool], timeout: float) -> SessionState:
    async def reached():
        current = await state(client, sid)
        return current if predicate(current) else None

    return await wait_until(reached, timeout, f"session {sid}")


async def wait_for_pnodes(supervisor: Supervisor, names: list[str], timeout: float = 120.0) -> dict[str, Heartbeat]:
    """Until every named PNode has sent a heartbeat, listening as the monitor does; the first of each."""
    seen: dict[str, Heartbeat] = {}

    async def on_beat(msg) -> None:
        seen.setdefault(msg.subject.rsplit(".", 1)[-1], Heartbeat.model_validate_json(msg.data))

    nc = await bus.connect(supervisor.credentials.credential("monitor", "bench-heartbeats"), name="bench-heartbeats")
    try:
        await nc.subscribe(Subjects().heartbeat_all(), cb=on_beat)
        await wait_until(lambda: _now(set(seen) >= set(names)), timeout, f"heartbeats of {', '.join(names)}", 0.1)
    finally:
        await nc.close()
    return seen


async def _now(value: bool) -> bool:
    return value


_TELEMETRY = TypeAdapter(Telemetry)


async def step_timings(supervisor: Supervisor, sid: str, last_step: int, wait_s: float = 10.0) -> list[StepTiming]:
    """Each PNode's `StepTiming` of session `sid`, read from the telemetry stream as the monitor reads it
    (a user may not), once one of `last_step` is there (or `wait_s` passed)."""
    async with connect(supervisor.credentials.credential("monitor")) as observer:
        log = EventLog(observer.js, observer.subjects)
        deadline = time.monotonic() + wait_s
        while True:
            records = await log.read(observer.subjects.tel_all("step"), stream=TEL_STREAM)
            timings = [t for t in (_TELEMETRY.validate_json(r.data) for r in records)
                       if isinstance(t, StepTiming) and t.session_id == sid]
            if any(t.step == last_step for t in timings) or time.monotonic() > deadline:
                return timings
            await asyncio.sleep(0.2)


def time_shares(timings: list[StepTiming], from_step: int) -> dict[str, dict[str, float]]:
    """Each PNode's median share of a step spent computing, sending and waiting, over steps `from_step` on
    (the dashboard's time shares)."""
    shares = {}
    for pnode in sorted({t.pnode for t in timings}):
        mine = [t for t in timings if t.pnode == pnode and t.step >= from_step and t.step_s > 0]
        shares[pnode] = {kind: statistics.median(getattr(t, f"{kind}_s") / t.step_s for t in mine)
                         for kind in ("compute", "send", "wait")}
    return shares
