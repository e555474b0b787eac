"""The orchestrator: handles session commands, keeps PNode liveness, drives sessions, takes over orphans.

Several orchestrators may run at once. Commands reach one of them through a shared durable
consumer; a session is driven by the one whose `SessionClaimed` made it into the log
(appends use the session's expected sequence, so two claims cannot both land). Each
orchestrator heartbeats; a running session whose claimant went silent is claimed by another,
which resumes it from its last committed checkpoint.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import time
import uuid

import nats.errors
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from pydantic import ValidationError

from computeall.network import NetworkError
from computeall.protocol import bus
from computeall.protocol.bus_failover import TRANSIENT
from computeall.protocol.commands import (
    CommandEnvelope,
    CreateSession,
    PauseSession,
    ResumeSession,
    StartSession,
    StopSession,
    ValidateSession,
)
from computeall.protocol.credentials import Credential
from computeall.protocol.eventlog import ConcurrencyError, EventLog, ensure_streams
from computeall.protocol.events import CommandRejected, EventEnvelope, PNodeLost
from computeall.protocol.limits import COMMAND_BYTES
from computeall.protocol.session_log import SessionLog
from computeall.protocol.session_state import Rejected, SessionState
from computeall.protocol.session_status import TERMINAL, SessionStatus
from computeall.protocol.subjects import LOG_STREAM, Subjects, command_sender, pnode_of
from computeall.protocol.object_store import checkpoint_bucket, open_bucket
from computeall.protocol.pnode_api import Reset
from computeall.protocol.telemetry import HEARTBEAT_TIMEOUT_S, Heartbeat

from .authorization import authorize
from .driver import SessionDriver
from .lanes import Lanes
from .network_jobs import NetworkJobs
from .initial_weights import check_source
from .membership import MembershipRecorder
from .pnode_calls import PNodeCalls
from .pnodes import PNodeRegistry
from .reads import SessionReads

log = logging.getLogger("computeall.orchestrator")

# each command is one method of the session aggregate, which returns the events to record
DECIDE = {
    CreateSession: lambda state, c, actor: state.create(c.config, owner=actor, start=c.start),
    StartSession: lambda state, c, actor: state.start(),
    PauseSession: lambda state, c, actor: state.pause(),
    ResumeSession: lambda state, c, actor: state.resume(c.fuse_heads),
    StopSession: lambda state, c, actor: state.stop(),
    ValidateSession: lambda state, c, actor: state.validate(),
}


class Orchestrator:
    def __init__(self, credential: Credential, subjects: Subjects, heartbeat_timeout_s: float = HEARTBEAT_TIMEOUT_S) -> None:
        self.credential = credential
        self.subjects = subjects
        self.heartbeat_timeout_s = heartbeat_timeout_s
        self.id = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}".replace(".", "-")
        self.registry = PNodeRegistry(heartbeat_timeout_s)
        self.peers: dict[str, float] = {}  # other orchestrators -> last heartbeat (monotonic)
        self.sessions: dict[str, SessionLog] = {}
        self.drivers: dict[str, asyncio.Task] = {}
        self.jobs = NetworkJobs()  # network checks and allocation, in child processes
        self._capacity_checks: dict[str, tuple] = {}  # session -> the live PNodes it did not fit on
        self._stop = asyncio.Event()

    async def run(self) -> None:
        self.nc = await bus.connect(self.credential, name=f"orchestrator-{self.id}", max_reconnect_attempts=-1,
                                    reconnected_cb=self._reconnected)
        self.js = self.nc.jetstream()
        await ensure_streams(self.js, self.subjects, replicas=bus.replicas(self.nc))
        await open_bucket(self.js, checkpoint_bucket(self.subjects), bus.replicas(self.nc))  # the PNodes write into it
        self.eventlog = EventLog(self.js, self.subjects)
        self.membership = MembershipRecorder(self.eventlog, actor=f"orchestrator:{self.id}")
        self.reads = SessionReads(self.nc, self.eventlog, self.subjects)
        await self.reads.start()
        self.calls = PNodeCalls(self.nc, self.subjects, self.registry)
        await self.nc.subscribe(self.subjects.heartbeat_all(), cb=self._on_pnode_heartbeat)
        await self.nc.subscribe(self.subjects.orchestrator_heartbeat_all(), cb=self._on_peer_heartbeat)
        await self.nc.subscribe(self.subjects.session_created_all(), cb=self._on_session_created)
        for record in await self.eventlog.read(self.subjects.session_created_all()):
            self._know(record.subject.split(".")[-2])
        # a PNode quarantined by any orchestrator, ever, gets no work from this one
        quarantined = self.subjects.pnode_evt_of_type("PNodeQuarantined")
        await self.nc.subscribe(quarantined, cb=self._on_quarantined)
        for record in await self.eventlog.read(quarantined):
            self.registry.quarantine(record.subject.split(".")[-2])
        # One durable consumer shared by every orchestrator: each command goes to one of them.
        # Explicit acks after handling: a crash mid-command redelivers it, and handlers are idempotent.
        commands = await self.js.pull_subscribe(
            f"{self.subjects.prefix}.cmd.>",
            durable="orchestrator",
            stream=LOG_STREAM,
            config=ConsumerConfig(ack_policy=AckPolicy.EXPLICIT, deliver_policy=DeliverPolicy.ALL, ack_wait=60.0),
        )
        background = (self._heartbeat(), self._adopt_orphans(), self._watch_pnodes(), self.jobs.offloop.warm())
        tasks = [asyncio.create_task(t) for t in background]
        lanes = Lanes()
        log.info("orchestrator %s ready on %s", self.id, ", ".join(self.credential.servers))
        while not self._stop.is_set():
            try:
                msgs = await commands.fetch(10, timeout=1.0)
            except (nats.errors.TimeoutError, TimeoutError):
                continue
            except TRANSIENT as exc:  # the bus is failing over: its consumer's leader is being elected
                log.info("commands unavailable (%s); the bus may be failing over", type(exc).__name__)
                await asyncio.sleep(0.5)
                continue
            for msg in msgs:
                await lanes.submit(msg.subject, lambda msg=msg: self._handle_and_ack(msg))
        lanes.cancel()
        for task in [*tasks, *self.drivers.values()]:
            task.cancel()
        # close, not drain: draining waits on the pull subscription's open fetch for up to 30 s
        await self.nc.close()

    def stop(self) -> None:
        self._stop.set()

    # -- liveness -----------------------------------------------------------------------
    async def _reconnected(self) -> None:
        """Our nats-server went away: replies sent to us meanwhile are lost (the steps in flight stall)."""
        log.warning("reconnected to the bus at %s", self.nc.connected_url.netloc if self.nc.connected_url else "?")
        self.registry.bus_disturbed()

    async def _on_pnode_heartbeat(self, msg) -> None:
        try:
            beat = Heartbeat.model_validate_json(msg.data)
            if beat.pnode != pnode_of(self.subjects, msg.subject):
                raise ValueError(f"it names PNode {beat.pnode!r}")
        except (ValidationError, ValueError) as exc:
            log.warning("ignored a heartbeat on %s: %s", msg.subject, str(exc)[:200])
            return
        self.membership.beat(beat)
        if self.registry.beat(beat):
            # declared lost, now back: its state is stale; it drops it and counts as a new PNode
            log.info("pnode %s is back after being declared lost; resetting it", beat.pnode)
            asyncio.ensure_future(self._reset(beat.pnode))

    async def _reset(self, pnode: str) -> None:
        try:
            await self.calls.one(pnode, Reset(), timeout=10.0)
        except Exception as exc:  # it may die again at once; the registry will notice
            log.warning("could not reset %s: %s", pnode, exc)

    async def _watch_pnodes(self) -> None:
        """Record `PNodeLost` once per PNode that goes silent (every orchestrator may notice: deduplicated)."""
        while True:
            for pnode in self.registry.newly_lost():
                silent = self.registry.silent_s(pnode)
                event = EventEnvelope(
                    id=f"lost-{pnode}-{int(time.time() - silent)}", actor=f"orchestrator:{self.id}",
                    payload=PNodeLost(pnode=pnode, silent_s=silent),
                )
                log.warning("pnode %s lost (silent for %.1fs)", pnode, silent)
                try:
                    await self.eventlog.append_event(self.subjects.pnode_evt(pnode, "PNodeLost"), event)
                except nats.errors.Error as exc:
                    log.warning("could not record PNodeLost for %s: %s", pnode, exc)
            await asyncio.sleep(0.5)

    async def _on_quarantined(self, msg) -> None:
        self.registry.quarantine(msg.subject.split(".")[-2])

    async def _on_peer_heartbeat(self, msg) -> None:
        peer = msg.subject.rsplit(".", 1)[-1]
        if peer != self.id:
            self.peers[peer] = time.monotonic()

    async def _heartbeat(self) -> None:
        while True:
            try:
                await self.nc.publish(self.subjects.orchestrator_heartbeat(self.id), b"")
            except nats.errors.Error as exc:
                log.warning("heartbeat failed: %s", exc)
            await asyncio.sleep(1.0)

    def _alive(self, orchestrator: str | None) -> bool:
        if orchestrator == self.id:
            return True
        seen = self.peers.get(orchestrator or "")
        return seen is not None and time.monotonic() - seen <= self.heartbeat_timeout_s

    # -- sessions -----------------------------------------------------------------------
    def _know(self, sid: str) -> SessionLog:
        if sid not in self.sessions:
            self.sessions[sid] = SessionLog(self.eventlog, sid)
        return self.sessions[sid]

    async def _on_session_created(self, msg) -> None:
        self._know(msg.subject.split(".")[-2])

    async def _adopt_orphans(self) -> None:
        """Drive every running session whose claimant is gone (after a crash, or at start-up)."""
        await asyncio.sleep(self.heartbeat_timeout_s)  # first learn which peers are alive
        while True:
            for sid, session in list(self.sessions.items()):
                if sid in self.drivers or session.state.status in TERMINAL:
                    continue
                try:
                    state = await session.refresh()
                except nats.errors.Error as exc:
                    log.warning("could not read session %s: %s", sid, exc)
                    continue
                # ours too: a driver of ours ends without ending the session only when the bus let it down
                if state.status == SessionStatus.RUNNING and (state.claimed_by == self.id or not self._alive(state.claimed_by)):
                    log.info("session %s is running without a live driver (was %s); taking it over", sid, state.claimed_by)
                    self._drive(session, takeover_from=state.claimed_by)
                elif state.waits_for_capacity and await self._fits(state):
                    log.info("session %s: capacity is back; resuming it", sid)
                    try:
                        await session.record("orchestrator", state.resume_for_capacity())
                    except ConcurrencyError:
                        continue  # someone else changed it first; look again next round
                    self._drive(session)
            await asyncio.sleep(1.0)

    async def _fits(self, state: SessionState) -> bool:
        """Whether the live PNodes can hold the session's network now (asked again only when they change)."""
        capacities = self.registry.capacities()
        asked = (tuple(sorted(capacities, key=lambda c: c.pnode)), state.fuse_heads, state.config)
        if self._capacity_checks.get(state.id) == asked:
            return False
        fits = await self.jobs.fits(state, capacities)
        if not fits:
            self._capacity_checks[state.id] = asked
        return fits

    def _drive(self, session: SessionLog, takeover_from: str | None = None) -> None:
        driver = SessionDriver(self.calls, self.subjects, session, self.registry, self.id, self.jobs, takeover_from)
        task = asyncio.create_task(driver.run())
        self.drivers[session.state.id] = task
        task.add_done_callback(lambda t: self._driver_done(session.state.id, t))

    def _driver_done(self, sid: str, task: asyncio.Task) -> None:
        self.drivers.pop(sid, None)
        if not task.cancelled() and task.exception():
            log.error("session %s: driver crashed", sid, exc_info=task.exception())

    # -- commands -------------------------------------------------------------------------
    async def _handle_and_ack(self, msg) -> None:
        """Handle one command and acknowledge it; a command the orchestrator fails on is rejected, never
        redelivered into the same failure (that would crash-loop every orchestrator)."""
        try:
            await self._handle_command(msg)
        except nats.errors.Error as exc:  # the bus failed mid-command: unacknowledged, it comes back
            log.warning("command on %s not handled, it will be redelivered: %s", msg.subject, exc)
            return
        except Exception as exc:
            log.exception("failed on a command on %s", msg.subject)
            sid = msg.subject.rsplit(".", 1)[-1]
            reason = f"the orchestrator failed on this command ({type(exc).__name__}); see its log"
            await self._reject(sid, _command_id(msg), "?", reason)
        await msg.ack()

    async def _handle_command(self, msg) -> None:
        try:
            user, sid = command_sender(self.subjects, msg.subject)
        except ValueError as exc:  # a subject of CA_LOG's `cmd` space no user publishes on
            log.warning("ignored a command: %s", exc)
            return
        if len(msg.data) > COMMAND_BYTES:  # refused unread: parsing is what a huge command would cost
            size = f"{len(msg.data):,} bytes; a command may have at most {COMMAND_BYTES:,}"
            log.warning("rejected a command of %s for %s", size, sid)
            await self._reject(sid, (msg.headers or {}).get("Nats-Msg-Id", "?"), "?", f"the command is {size}")
            return
        try:
            command = CommandEnvelope.model_validate_json(msg.data)
        except ValidationError as exc:
            reason = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()[:5])
            log.warning("rejected a malformed command for %s: %s", sid, reason)
            await self._reject(sid, _command_id(msg), "?", f"malformed command: {reason}")
            return
        if command.session_id != sid:
            await self._reject(sid, command.id, command.type, f"session_id {command.session_id!r} does not match the subject")
            return
        session = self._know(sid)
        for _ in range(5):  # optimistic concurrency: on a conflict, fold what others wrote and decide again
            try:
                await session.refresh()
                await authorize(user, command, session.state, self.reads.owner)
                await self._decide(session, command)
                return
            except Rejected as exc:
                await self._reject(sid, command.id, command.type, str(exc))
                return
            except ConcurrencyError:
                continue
        await self._reject(sid, command.id, command.type, "the session kept changing; try again")

    async def _decide(self, session: SessionLog, command: CommandEnvelope) -> None:
        """Command -> the aggregate's decision -> its events in the log; a driver when it starts to run."""
        was = session.state.status
        events = DECIDE[type(command.payload)](session.state, command.payload, command.actor)
        if isinstance(command.payload, CreateSession) and events:
            try:  # a network that does not load is rejected before anything is recorded
                await self.jobs.check(command.payload.config.network_yaml)
            except NetworkError as exc:
                raise Rejected(str(exc)) from None
            await check_source(session.eventlog, command.payload.config.init_from, command.actor)
        await session.record(command.actor, events)
        if was != SessionStatus.RUNNING and session.state.status == SessionStatus.RUNNING:
            self._drive(session)

    async def _reject(self, sid: str, command_id: str, command_type: str, reason: str) -> None:
        event = EventEnvelope(
            actor="orchestrator", session_id=sid,
            payload=CommandRejected(command_id=command_id, command_type=command_type, reason=reason),
        )
        try:
            await self.eventlog.append_session_event(event, None)
        except Exception as exc:  # a reject that cannot be recorded is logged, never fatal
            log.warning("could not record CommandRejected for %s: %s", sid, exc)


def _command_id(msg) -> str:
    """The id of a command left unread or malformed, so the sender can match the rejection: `Nats-Msg-Id`,
    which publishers set to it, else the JSON's `id` when there is one."""
    header = (msg.headers or {}).get("Nats-Msg-Id")
    if header:
        return header
    try:
        value = json.loads(msg.data).get("id")
    except (ValueError, AttributeError, RecursionError):
        return "?"
    return value if isinstance(value, str) else "?"
