"""The orchestrator: handles session commands, keeps PNode liveness, drives sessions, takes over orphans.

Several orchestrators may run at once. Commands reach one of them through a shared durable
consumer; a session is driven by the one whose `SessionClaimed` made it into the log
(appends use the session's expected sequence, so two claims cannot both land). Each
orchestrator heartbeats; a running session whose claimant went silent is claimed by another,
which resumes it from its last committed checkpoint. A standby (`--standby`, what the machines that join
a bus run) does only that: it takes no commands and starts no queued session while an active
orchestrator heartbeats, and becomes active itself once none has for the heartbeat timeout.
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
from computeall.protocol.bus_failover import TRANSIENT, TRY_S
from computeall.protocol.commands import CommandEnvelope, CreateSession
from computeall.protocol.credentials import Credential
from computeall.protocol.eventlog import ConcurrencyError, EventLog, ensure_streams
from computeall.protocol.events import CommandRejected, EventEnvelope, PNodeLost, SessionCreated
from computeall.protocol.fair_share import FairShareLimits
from computeall.protocol.limits import COMMAND_BYTES
from computeall.protocol.session_log import SessionLog
from computeall.protocol.session_commands import COMMANDS, decide
from computeall.protocol.session_state import Rejected, SessionState
from computeall.protocol.session_status import TERMINAL, SessionStatus
from computeall.protocol.subjects import LOG_STREAM, Subjects, command_sender, pnode_of
from computeall.protocol.pnode_api import Reset
from computeall.protocol.telemetry import HEARTBEAT_INTERVAL_S, HEARTBEAT_TIMEOUT_S, Heartbeat, OrchestratorBeat

from .authorization import authorize, claim_new_id
from .command_rate import Take
from .driver import SessionDriver
from .fair_share import FairShare
from .lanes import Lanes
from .network_jobs import NetworkJobs
from .initial_weights import check_source
from .preparation import check_data
from .membership import MembershipRecorder, ask_authority
from .pnode_calls import PNodeCalls
from .pnodes import PNodeRegistry
from .reads import SessionReads
from .session_storage import Grants
from .stalls import StallDeadlines

log = logging.getLogger("computeall.orchestrator")

# how long a stopping orchestrator waits for its sessions to checkpoint (a step and a save); the
# supervisor of `computeall up` gives it this long and a little more before it kills it
SHUTDOWN_S = 60.0


class Orchestrator:
    def __init__(self, credential: Credential, subjects: Subjects, heartbeat_timeout_s: float = HEARTBEAT_TIMEOUT_S,
                 limits: FairShareLimits = FairShareLimits(), grants: Grants = "authority", standby: bool = False) -> None:
        self.credential = credential
        self.standby = standby
        self._started = time.monotonic()
        self.subjects = subjects
        self.heartbeat_timeout_s = heartbeat_timeout_s
        self.grants = grants  # how a session's PNodes come to reach its checkpoints (`session_storage`)
        self.id = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}".replace(".", "-")
        self.registry = PNodeRegistry(heartbeat_timeout_s)
        self.peers: dict[str, float] = {}  # other orchestrators -> last heartbeat (monotonic)
        self.active_peers: dict[str, float] = {}  # those of them that are not standbys
        self.sessions: dict[str, SessionLog] = {}  # every session seen created, in that order
        self.fair = FairShare(limits, self.registry, self.sessions)
        self._created_seq = 0  # the newest SessionCreated read from the log
        self.drivers: dict[str, asyncio.Task] = {}
        self.driving: dict[str, SessionDriver] = {}  # the drivers of those tasks, to ask them to shut down
        # session -> how long its requests may go unanswered: a pause for capacity ends a driver, and what
        # its stalls taught (a first pass slower than allowed, twice as long allowed each time) must not
        self.deadlines: dict[str, StallDeadlines] = {}
        self.jobs = NetworkJobs()  # network checks and allocation, in child processes
        self._capacity_checks: dict[str, tuple] = {}  # session -> the live PNodes it did not fit on
        self._stop = asyncio.Event()

    async def run(self) -> None:
        self.nc = await bus.connect(self.credential, name=f"orchestrator-{self.id}", max_reconnect_attempts=-1,
                                    reconnected_cb=self._reconnected)
        self.js = self.nc.jetstream()
        await ensure_streams(self.js, self.subjects, replicas=bus.replicas(self.nc))
        self.eventlog = EventLog(self.nc.jetstream(timeout=TRY_S), self.subjects)  # each try bounded: it tries again
        self.membership = MembershipRecorder(self.eventlog, f"orchestrator:{self.id}", self.registry,
                                             ask_authority(self.nc, self.subjects))
        self.reads = SessionReads(self.nc, self.eventlog, self.subjects)
        await self.reads.start()
        self.calls = PNodeCalls(self.nc, self.subjects, self.registry)
        await self.nc.subscribe(self.subjects.heartbeat_all(), cb=self._on_pnode_heartbeat)
        await self.nc.subscribe(self.subjects.orchestrator_heartbeat_all(), cb=self._on_peer_heartbeat)
        await self.nc.subscribe(self.subjects.session_created_all(), cb=self._on_session_created)
        await self._learn_sessions()
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
            if self._standing_by():
                await asyncio.sleep(1.0)
                continue
            try:
                msgs = await commands.fetch(10, timeout=1.0)
            except (nats.errors.TimeoutError, TimeoutError):
                continue
            except TRANSIENT as exc:  # the bus is failing over: its consumer's leader is being elected
                log.info("commands unavailable (%s); the bus may be failing over", type(exc).__name__)
                await asyncio.sleep(0.5)
                continue
            for msg in msgs:
                if await self._over_rate(msg, lanes):
                    continue
                await lanes.submit(msg.subject, lambda msg=msg: self._handle_and_ack(msg))
        lanes.cancel()
        await self._checkpoint_driven_sessions()
        for task in [*tasks, *self.drivers.values()]:
            task.cancel()
        # close, not drain: draining waits on the pull subscription's open fetch for up to 30 s
        await self.nc.close()

    def stop(self) -> None:
        self._stop.set()

    async def _checkpoint_driven_sessions(self) -> None:
        """On the way out, each session this orchestrator drives checkpoints at its next step boundary
        (the PNodes still run: `computeall up` stops the orchestrator first), so that a restart goes on
        from there instead of from an older checkpoint. Bounded: past `SHUTDOWN_S` the older one stands."""
        training = [sid for sid, driver in self.driving.items() if driver.state.status == SessionStatus.RUNNING]
        for sid in training:
            self.driving[sid].shut_down()
        if training:  # a driver whose session ended has only its own cleanup left: not waited for
            log.info("checkpointing %d session(s) before stopping", len(training))
            await asyncio.wait([self.drivers[sid] for sid in training], timeout=SHUTDOWN_S)

    # -- liveness -----------------------------------------------------------------------
    async def _reconnected(self) -> None:
        """Our nats-server went away: replies sent to us meanwhile are lost (the steps in flight stall)."""
        log.warning("reconnected to the bus at %s", self.nc.connected_url.netloc if self.nc.connected_url else "?")
        self.registry.bus_disturbed()
        asyncio.ensure_future(self._learn_sessions())  # a SessionCreated published meanwhile did not reach us

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
            asyncio.ensure_future(self._reset(beat.pnode, beat.incarnation))

    async def _reset(self, pnode: str, incarnation: str) -> None:
        """Until it dropped what it held (it gets no work before), while it beats and was not restarted."""
        while self.registry.is_stale(pnode) and self.registry.is_live(pnode):
            try:
                await self.calls.one(pnode, Reset(), timeout=10.0)
                self.registry.reset_done(pnode, incarnation)
                return
            except Exception as exc:  # it may die again at once: the registry will notice
                log.warning("could not reset %s: %s", pnode, exc)
                await asyncio.sleep(HEARTBEAT_INTERVAL_S)

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
        try:
            beat = OrchestratorBeat.model_validate_json(msg.data) if msg.data else OrchestratorBeat()
        except ValidationError:
            return
        if peer != self.id:
            self.peers[peer] = time.monotonic()
            if not beat.standby:
                self.active_peers[peer] = self.peers[peer]

    def _standing_by(self) -> bool:
        """A standby stays one while an active orchestrator heartbeats (and until it had the time to hear
        one); then it takes over for good: commands, queued sessions."""
        if not self.standby:
            return False
        now = time.monotonic()
        if now - self._started < self.heartbeat_timeout_s or any(
                now - seen <= self.heartbeat_timeout_s for seen in self.active_peers.values()):
            return True
        log.warning("no active orchestrator heartbeats: this standby takes commands from now on")
        self.standby = False
        return False

    async def _heartbeat(self) -> None:
        while True:
            try:
                beat = OrchestratorBeat(standby=self.standby).model_dump_json().encode()
                await self.nc.publish(self.subjects.orchestrator_heartbeat(self.id), beat)
            except nats.errors.Error as exc:
                log.warning("heartbeat failed: %s", exc)
            await asyncio.sleep(1.0)

    def _alive(self, orchestrator: str | None) -> bool:
        if orchestrator == self.id:
            return True
        seen = self.peers.get(orchestrator or "")
        return seen is not None and time.monotonic() - seen <= self.heartbeat_timeout_s

    # -- sessions -----------------------------------------------------------------------
    def _know(self, sid: str, owner: str) -> SessionLog:
        """A session seen created. Its owner is known at once (the fold sets the same when it reads
        `SessionCreated`), so commands are authorized from memory."""
        if sid not in self.sessions:
            self.sessions[sid] = SessionLog(self.eventlog, sid)
            self.sessions[sid].state.owner = owner
        return self.sessions[sid]

    def _learn(self, data: bytes) -> None:
        try:
            event = EventEnvelope.model_validate_json(data)
        except ValidationError:
            return  # a type this build does not know
        if isinstance(event.payload, SessionCreated) and event.session_id:
            self._know(event.session_id, event.payload.owner)

    async def _learn_sessions(self) -> None:
        """Every session created since the last look (at start-up: all of them)."""
        for record in await self.eventlog.read(self.subjects.session_created_all(), start_seq=self._created_seq + 1):
            self._learn(record.data)
            self._created_seq = max(self._created_seq, record.seq)

    async def _on_session_created(self, msg) -> None:
        self._learn(msg.data)

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
                elif self._standing_by():
                    continue  # the active orchestrator starts what waits for room
                elif state.waits_for_capacity and self.fair.slots(state.owner).free and await self._fits(state):
                    log.info("session %s: capacity is back; resuming it", sid)
                    await self._run_again(session, state.resume_for_capacity)
            for session in [] if self._standing_by() else self.fair.next_to_start():
                log.info("session %s: a running slot of %s is free; starting it", session.state.id, session.state.owner)
                await self._run_again(session, lambda s=session: s.state.admit())
            await asyncio.sleep(1.0)

    async def _run_again(self, session: SessionLog, decide) -> None:
        """Record the orchestrator's own decision to run a session (`decide()` -> events) and drive it,
        while its owner still has a running slot free."""
        async with self.fair.deciding(session.state.owner):
            try:
                await session.refresh()
                if self.fair.slots(session.state.owner).free:
                    await session.record("orchestrator", decide())
            except (ConcurrencyError, nats.errors.Error) as exc:
                log.info("session %s changed meanwhile (%s); looking again next round", session.state.id, exc)
                return
        if session.state.status == SessionStatus.RUNNING and session.state.id not in self.drivers:
            self._drive(session)

    async def _fits(self, state: SessionState) -> bool:
        """Whether the live PNodes can hold the session's network now (asked again only when they change)."""
        capacities = self.fair.pnodes_of(state.owner).capacities()
        asked = (tuple(sorted(capacities, key=lambda c: c.pnode)), state.fuse_heads, state.config)
        if self._capacity_checks.get(state.id) == asked:
            return False
        fits = await self.jobs.fits(state, capacities)
        if not fits:
            self._capacity_checks[state.id] = asked
        return fits

    def _drive(self, session: SessionLog, takeover_from: str | None = None) -> None:
        sid = session.state.id
        pnodes = self.fair.pnodes_of(session.state.owner)  # the owner's part of the pool
        driver = SessionDriver(self.calls, self.subjects, session, pnodes, self.id, self.jobs, takeover_from,
                               grants=self.grants, deadlines=self.deadlines.setdefault(sid, StallDeadlines()))
        task = asyncio.create_task(_after(self.drivers.get(sid), driver))
        self.drivers[sid] = task
        self.driving[sid] = driver
        task.add_done_callback(lambda t: self._driver_done(sid, t))

    def _driver_done(self, sid: str, task: asyncio.Task) -> None:
        if self.drivers.get(sid) is task:  # not a driver that ended after the next one started
            del self.drivers[sid]
            driver = self.driving.pop(sid, None)
            if driver and driver.state.status in TERMINAL:
                self.deadlines.pop(sid, None)
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
        try:
            authorize(user, command, self._owner)  # from memory: refusing a forged or stray command reads nothing
            if sid not in self.sessions:  # a create (authorize refused anything else) for an id never created
                await claim_new_id(user, sid, self.reads.owner)
        except Rejected as exc:
            await self._reject(sid, command.id, command.type, str(exc))
            return
        session = self.sessions.get(sid) or SessionLog(self.eventlog, sid)
        for _ in range(5):  # optimistic concurrency: on a conflict, fold what others wrote and decide again
            try:
                if _may_change(session.state, command):  # else decided on what is in memory
                    await session.refresh()
                await self._decide(session, command)
                return
            except Rejected as exc:
                await self._reject(sid, command.id, command.type, str(exc))
                return
            except ConcurrencyError:
                continue
        await self._reject(sid, command.id, command.type, "the session kept changing; try again")

    def _owner(self, sid: str) -> str | None:
        session = self.sessions.get(sid)
        return session.state.owner if session else None

    async def _over_rate(self, msg, lanes: Lanes) -> bool:
        """Whether the sender is over the command rate (`FairShare.rate`): then the command is
        acknowledged unread, and only the first of the burst is rejected in the log."""
        try:
            user, sid = command_sender(self.subjects, msg.subject)
        except ValueError:
            return False  # not a user's subject: `_handle_command` says so
        taken = self.fair.rate.take(user)
        if taken is Take.TAKEN:
            return False
        if taken is Take.REFUSED_FIRST:
            reason = self.fair.rate.describe(user)
            log.warning("refusing commands: %s", reason)
            await lanes.submit(msg.subject, lambda: self._reject(sid, _command_id(msg), "?", reason))
        await msg.ack()
        return True

    async def _decide(self, session: SessionLog, command: CommandEnvelope) -> None:
        """Command -> the aggregate's decision -> its events in the log; a driver when it starts to run."""
        payload, owner = command.payload, command.actor
        if isinstance(payload, CreateSession) and session.state.status == SessionStatus.NEW:
            try:  # a network that does not load is rejected before anything is recorded
                await self.jobs.check(payload.config.network_yaml)
            except NetworkError as exc:
                raise Rejected(str(exc)) from None
            await check_source(session.eventlog, payload.config.init_from, owner)
            await check_data(self.nc, self.subjects, owner, payload.config.data)
        async with self.fair.deciding(owner):  # the owner's running count holds until the events are in
            was = session.state.status
            # the aggregate's method for the command (`session_commands`); one that makes a session run
            # is given its owner's running slots
            events = decide(session.state, payload, owner, self.fair.slots(owner))
            if events and was == SessionStatus.NEW:
                self.sessions.setdefault(session.state.id, session)  # seen created from here on
            await session.record(owner, events)
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


def _may_change(state: SessionState, command: CommandEnvelope) -> bool:
    """Whether the command may change the session, so its log must be read: an ended session changes
    only by a command its state allows (its deletion, once)."""
    return state.status not in TERMINAL or state.status in COMMANDS[type(command.payload)].allowed


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


async def _after(previous: asyncio.Task | None, driver: SessionDriver) -> None:
    """`driver` runs once the session's previous driver ended: one still ending a pause when the session
    is resumed must never drive beside the next (their passes supersede each other's)."""
    if previous is not None and not previous.done():
        await asyncio.wait([previous])
    await driver.run()
