"""The orchestrator: reads session commands from CA_LOG, keeps PNode liveness, drives sessions."""

from __future__ import annotations

import asyncio
import logging

import nats
import nats.errors
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from pydantic import BaseModel, ValidationError

from computeall.protocol.commands import CommandEnvelope, CreateSession, StartSession
from computeall.protocol.eventlog import ConcurrencyError, EventLog, ensure_streams
from computeall.protocol.events import CommandRejected, EventEnvelope, SessionCreated, SessionStarted
from computeall.protocol.subjects import LOG_STREAM, Subjects
from computeall.protocol.telemetry import Heartbeat

from .driver import SessionDriver
from .pnodes import PNodeRegistry
from .session import SessionState, fold

log = logging.getLogger("computeall.orchestrator")


class Orchestrator:
    def __init__(self, nats_url: str, subjects: Subjects, heartbeat_timeout_s: float = 5.0) -> None:
        self.nats_url = nats_url
        self.subjects = subjects
        self.registry = PNodeRegistry(heartbeat_timeout_s)
        self.drivers: dict[str, asyncio.Task] = {}
        self._stop = asyncio.Event()

    async def run(self) -> None:
        self.nc = await nats.connect(self.nats_url, name="orchestrator", max_reconnect_attempts=-1)
        self.js = self.nc.jetstream()
        await ensure_streams(self.js, self.subjects)
        self.eventlog = EventLog(self.js, self.subjects)
        await self.nc.subscribe(self.subjects.heartbeat_all(), cb=self._on_heartbeat)
        # One durable consumer shared by every orchestrator: each command goes to one of them.
        # Explicit acks: a command is acked once handled, so a crash mid-handling redelivers it.
        commands = await self.js.pull_subscribe(
            f"{self.subjects.prefix}.cmd.>",
            durable="orchestrator",
            stream=LOG_STREAM,
            config=ConsumerConfig(ack_policy=AckPolicy.EXPLICIT, deliver_policy=DeliverPolicy.ALL, ack_wait=60.0),
        )
        log.info("orchestrator ready on %s", self.nats_url)
        while not self._stop.is_set():
            try:
                msgs = await commands.fetch(10, timeout=1.0)
            except (nats.errors.TimeoutError, TimeoutError):
                continue
            for msg in msgs:
                await self._handle_command(msg)
                await msg.ack()
        for task in self.drivers.values():
            task.cancel()
        # close, not drain: draining waits on the pull subscription's open fetch for up to 30 s
        await self.nc.close()

    def stop(self) -> None:
        self._stop.set()

    async def _on_heartbeat(self, msg) -> None:
        try:
            self.registry.beat(Heartbeat.model_validate_json(msg.data))
        except ValidationError:
            log.warning("ignored a malformed heartbeat on %s", msg.subject)

    async def _handle_command(self, msg) -> None:
        sid = msg.subject.rsplit(".", 1)[-1]
        try:
            command = CommandEnvelope.model_validate_json(msg.data)
        except ValidationError as exc:
            reason = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()[:5])
            log.warning("rejected a malformed command for %s: %s", sid, reason)
            await self._reject(sid, "?", "?", f"malformed command: {reason}")
            return
        if command.session_id != sid:
            await self._reject(sid, command.id, command.type, f"session_id {command.session_id!r} does not match the subject")
            return
        state = await self._load(sid)
        payload = command.payload
        try:
            if isinstance(payload, CreateSession):
                await self._create(state, command, payload)
            elif isinstance(payload, StartSession):
                await self._start(state, command)
            else:
                await self._reject(sid, command.id, command.type, f"{command.type} is not supported yet", state)
        except ConcurrencyError:
            log.info("session %s is handled by another orchestrator", sid)

    async def _create(self, state: SessionState, command: CommandEnvelope, payload: CreateSession) -> None:
        if state.status != "new":
            if state.config == payload.config and state.owner == command.actor:
                return  # the same create again (a redelivery): already done
            await self._reject(state.id, command.id, command.type, f"session {state.id} already exists", state)
            return
        created = EventEnvelope(
            actor=command.actor, session_id=state.id, payload=SessionCreated(config=payload.config, owner=command.actor)
        )
        state.apply(created, await self.eventlog.append_session_event(created, state.last_seq))
        if payload.start:
            await self._start(state, command)

    async def _start(self, state: SessionState, command: CommandEnvelope) -> None:
        if state.status != "created":
            await self._reject(state.id, command.id, command.type, f"cannot start a session that is {state.status}", state)
            return
        started = EventEnvelope(actor=command.actor, session_id=state.id, payload=SessionStarted())
        state.apply(started, await self.eventlog.append_session_event(started, state.last_seq))
        self._drive(state)

    def _drive(self, state: SessionState) -> None:
        driver = SessionDriver(self.nc, self.subjects, self.eventlog, self.registry, state)
        task = asyncio.create_task(driver.run())
        self.drivers[state.id] = task
        task.add_done_callback(lambda t: self._driver_done(state.id, t))

    def _driver_done(self, sid: str, task: asyncio.Task) -> None:
        self.drivers.pop(sid, None)
        if not task.cancelled() and task.exception():
            exc = task.exception()
            if isinstance(exc, ConcurrencyError):
                log.info("session %s: another orchestrator took over", sid)
            else:
                log.error("session %s: driver crashed", sid, exc_info=exc)

    async def _load(self, sid: str) -> SessionState:
        records = await self.eventlog.read(self.subjects.session_evt_all(sid))
        events = []
        for r in records:
            try:
                events.append((r.seq, EventEnvelope.model_validate_json(r.data)))
            except ValidationError:
                log.warning("skipped an unreadable event at seq %d", r.seq)
        return fold(sid, events)

    async def _reject(self, sid: str, command_id: str, command_type: str, reason: str, state: SessionState | None = None) -> None:
        payload: BaseModel = CommandRejected(command_id=command_id, command_type=command_type, reason=reason)
        event = EventEnvelope(actor="orchestrator", session_id=sid, payload=payload)
        try:
            await self.eventlog.append_session_event(event, None)
        except Exception as exc:  # a reject that cannot be recorded is logged, never fatal
            log.warning("could not record CommandRejected for %s: %s", sid, exc)
