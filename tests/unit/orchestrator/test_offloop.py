"""Jobs run in child processes: results come back, failures become `JobError`, an overrunning or
memory-hungry job is stopped, and the event loop keeps running meanwhile. Sessions' command
lanes run side by side, each in order."""

import asyncio
import os
import time

import pytest

from computeall.orchestrator.lanes import Lanes
from computeall.orchestrator.network_jobs import NetworkJobs
from computeall.orchestrator.offloop import JobError, OffLoop
from computeall.network import NetworkError

from .test_commands import NETWORK


def spin(seconds: float) -> int:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass
    return os.getpid()


def hog() -> bytes:
    return b"x" * (8 << 30)


def fail() -> None:
    raise KeyError("nope")


@pytest.fixture
def offloop():
    return OffLoop(memory_bytes=1 << 30)


async def test_a_job_runs_in_another_process_while_the_loop_keeps_ticking(offloop):
    ticks = 0

    async def tick():
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0.01)

    ticker = asyncio.create_task(tick())
    pid = await offloop.run(spin, (0.5,), timeout_s=30)
    ticker.cancel()
    assert pid != os.getpid()
    assert ticks >= 10, "the loop ran while the job spun"


async def test_failures_are_job_errors_and_the_next_job_runs(offloop):
    with pytest.raises(JobError, match="took longer than 0.3 s"):
        await offloop.run(spin, (30.0,), timeout_s=0.3)
    with pytest.raises(JobError, match="ran out of memory"):
        await offloop.run(hog, (), timeout_s=30)
    with pytest.raises(JobError, match="KeyError: 'nope'"):
        await offloop.run(fail, (), timeout_s=30)
    assert await offloop.run(spin, (0.0,), timeout_s=30) != os.getpid()


async def test_network_jobs_check_and_time_out(offloop):
    jobs = NetworkJobs(offloop)
    await jobs.check(NETWORK)
    with pytest.raises(NetworkError, match="cycle"):
        await jobs.check(NETWORK.replace("inputs: [b3.res2]", "inputs: [head]"))

    class Overrun(OffLoop):  # the check's child outlived its limit (a real overrun: the test above)
        async def run(self, function, args, timeout_s):
            raise JobError(f"took longer than {timeout_s:g} s")

    with pytest.raises(NetworkError, match="checking the network failed: took longer than 0.5 s"):
        await NetworkJobs(Overrun(), check_timeout_s=0.5).check(NETWORK)


async def test_lanes_keep_each_sessions_order_and_let_others_pass():
    lanes, done = Lanes(), []
    slow_started = asyncio.Event()
    release = asyncio.Event()

    async def slow():
        slow_started.set()
        await release.wait()
        done.append("a1")

    def record(name):
        async def work():
            done.append(name)
        return work

    await lanes.submit("a", slow)
    await lanes.submit("a", record("a2"))
    await lanes.submit("b", record("b1"))
    await slow_started.wait()
    await asyncio.sleep(0.05)
    assert done == ["b1"], "session b's command ran while a's first was still running"
    release.set()
    while len(done) < 3:
        await asyncio.sleep(0.01)
    assert done == ["b1", "a1", "a2"]
