"""computeall in the WAN lab: whole sessions with each PNode behind its own shaped link.

NATS, the orchestrator and the dataset service run in the root namespace (the `Cloud`); for a
session, each lab node runs one PNode (`python -m computeall.pnode`, its own credential) in its
namespace, on its cores, dialling NATS through its link, so every tensor between PNodes crosses
two links, as on the internet:

    async with running_cluster(directory, pnodes=0) as cloud:     # computeall.cli.embedded
        with WanLab("city", nodes=2) as lab:
            run = await run_session(cloud, lab, config)

The session must complete; a failure or a refusal raises with the orchestrator's reason and where
the logs are. A cloud serves one session after another (the dataset is prepared once); each
session's PNodes are new ones, named after their namespaces, and leave when it ends.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from contextlib import aclosing
from dataclasses import dataclass, field

from pydantic import TypeAdapter

from computeall.cli.client import Client, connect
from computeall.cli.follow import start_session
from computeall.cli.supervisor import Supervisor
from computeall.protocol.config import SessionConfig
from computeall.protocol.eventlog import EventLog
from computeall.protocol.events import (Allocated, CommandRejected, EventEnvelope, PNodeJoined, SessionCompleted,
                                        SessionFailed, StepCompleted)
from computeall.protocol.subjects import TEL_STREAM
from computeall.protocol.telemetry import StepTiming, Telemetry
from computeall.protocol.throughput import Throughput

from .lab import Node, WanLab


@dataclass
class SessionRun:
    session_id: str
    steps: list[StepCompleted] = field(default_factory=list)
    recorded_at: list[float] = field(default_factory=list)  # when each StepCompleted was recorded
    assignment: dict[str, str] = field(default_factory=dict)  # vnode -> pnode (the first allocation)
    estimated_step_s: float | None = None  # what the allocator expected of a step
    throughput: dict[str, Throughput | None] = field(default_factory=dict)  # what each PNode measured at join
    timings: list[StepTiming] = field(default_factory=list)  # each PNode's part of each step

    @property
    def losses(self) -> list[float]:
        return [s.loss for s in self.steps]

    @property
    def step_intervals_s(self) -> list[float]:
        """Seconds from one recorded step to the next: a step with every overhead the system has."""
        return [b - a for a, b in zip(self.recorded_at, self.recorded_at[1:])]


def pnode_name(node: Node) -> str:
    return node.netns  # unique on this machine: a cloud never mistakes an earlier lab's PNode for this one


Cloud = tuple[Client, Supervisor]  # what `running_cluster(directory, pnodes=0)` yields


def start_pnode(lab: WanLab, node: Node, supervisor: Supervisor) -> subprocess.Popen:
    """A PNode in `node`'s namespace with its own credential, dialling NATS over its link, with one
    torch thread per core it is pinned to."""
    host, port = lab.expose(node, ("127.0.0.1", int(supervisor.nats_url.rsplit(":", 1)[1])))
    share = max(1, (os.cpu_count() or 1) // len(node.cores))  # set_cpu_threads divides the machine's cores
    argv = [sys.executable, "-m", "computeall.pnode", "--nats", f"nats://{host}:{port}",
            *supervisor.credential_args("pnode", pnode_name(node)), "--processes-on-machine", str(share)]
    log = open(supervisor.logs / f"{pnode_name(node)}.log", "ab")
    return lab.popen(node, argv, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})


async def run_session(cloud: Cloud, lab: WanLab, config: SessionConfig, timeout_s: float = 900.0) -> SessionRun:
    """One PNode per lab node, `config` run to completion on them, the PNodes stopped."""
    client, supervisor = cloud
    pnodes = [start_pnode(lab, node, supervisor) for node in lab.nodes]
    try:
        spread = {"min_pnodes": len(lab.nodes), "pipeline": config.pipeline.model_copy(update={"stages": len(lab.nodes)})}
        sid, command_id = await start_session(client, config.model_copy(update=spread))
        try:
            run = await asyncio.wait_for(_follow(client, sid, command_id), timeout_s)
        except asyncio.TimeoutError:
            raise RuntimeError(f"session {sid} did not complete in {timeout_s:.0f}s; logs: {supervisor.logs}") from None
        await _observe(supervisor, run, [pnode_name(node) for node in lab.nodes])
        return run
    finally:
        for proc in pnodes:  # SIGTERM: each leaves once the orchestrator unloaded the finished session
            _stop(proc)


async def _follow(client: Client, sid: str, command_id: str) -> SessionRun:
    run = SessionRun(sid)
    events = client.follow(sid)  # through the orchestrator, as the session's user
    async with aclosing(events):
        async for _, event in events:
            p = event.payload
            if isinstance(p, StepCompleted):
                run.steps.append(p)
                run.recorded_at.append(event.ts)
            elif isinstance(p, Allocated) and not run.assignment:
                run.assignment = {pl.vnode: pl.pnode for pl in p.placements}
                run.estimated_step_s = p.estimated_step_s
            elif isinstance(p, SessionCompleted):
                return run
            elif isinstance(p, SessionFailed):
                raise RuntimeError(f"session {sid} failed: {p.reason}")
            elif isinstance(p, CommandRejected) and p.command_id == command_id:
                raise RuntimeError(f"session {sid} was refused: {p.reason}")
    raise RuntimeError(f"the event stream of session {sid} ended")


_TELEMETRY = TypeAdapter(Telemetry)


async def _observe(supervisor: Supervisor, run: SessionRun, pnodes: list[str]) -> None:
    """What the PNodes measured when they joined and their step timings, read from the event log and
    the telemetry stream as the monitor reads them (a user may read neither)."""
    async with connect(supervisor.credentials.credential("monitor")) as observer:
        log = EventLog(observer.js, observer.subjects)
        run.timings = await _timings(log, run, pnodes)
        for pnode in pnodes:
            records = await log.read(observer.subjects.pnode_evt(pnode, "PNodeJoined"))
            joined = [EventEnvelope.model_validate_json(r.data).payload for r in records]
            run.throughput[pnode] = joined[-1].throughput if joined and isinstance(joined[-1], PNodeJoined) else None


async def _timings(log: EventLog, run: SessionRun, pnodes: list[str], wait_s: float = 10.0) -> list[StepTiming]:
    """The session's step timings, once every PNode's timing of the last step is stored."""
    last = run.steps[-1].step if run.steps else -1
    deadline = asyncio.get_running_loop().time() + wait_s
    while True:
        records = await log.read(log.subjects.tel_all("step"), stream=TEL_STREAM)
        samples = (_TELEMETRY.validate_json(r.data) for r in records)
        timings = [t for t in samples if isinstance(t, StepTiming) and t.session_id == run.session_id]
        if {t.pnode for t in timings if t.step == last} >= set(pnodes) or asyncio.get_running_loop().time() > deadline:
            return sorted(timings, key=lambda t: (t.step, t.pnode))
        await asyncio.sleep(0.2)


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
