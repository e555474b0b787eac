"""PNodeJoined and PNodeLeft, recorded from the PNodes' heartbeats.

A PNode appends nothing to the log (its credential cannot): its first heartbeat of a process
start (a new `incarnation`) makes it joined, its last one (`left`) makes it gone. Every
orchestrator may see the same heartbeat, so each event's id is derived from the PNode and its
incarnation and JetStream drops the second copy.
"""

from __future__ import annotations

import asyncio
import logging

import nats.errors

from computeall.protocol.eventlog import EventLog
from computeall.protocol.events import EventEnvelope, PNodeJoined, PNodeLeft
from computeall.protocol.telemetry import Heartbeat

log = logging.getLogger("computeall.orchestrator.membership")


class MembershipRecorder:
    def __init__(self, eventlog: EventLog, actor: str) -> None:
        self.eventlog = eventlog
        self.actor = actor
        self._joined: set[tuple[str, str]] = set()  # (pnode, incarnation) recorded by this orchestrator
        self._pending: set[asyncio.Task] = set()

    def beat(self, beat: Heartbeat) -> None:
        """Called for every heartbeat; records in the background, never delaying the caller."""
        key = (beat.pnode, beat.incarnation)
        if beat.left:
            self._joined.discard(key)
            self._record(f"left-{beat.pnode}-{beat.incarnation}", PNodeLeft(pnode=beat.pnode), beat.pnode)
        elif key not in self._joined:
            self._joined.add(key)
            joined = PNodeJoined(pnode=beat.pnode, host=beat.host, os_pid=beat.os_pid, device=beat.device,
                                 memory_bytes=beat.memory_bytes, throughput=beat.throughput)
            self._record(f"joined-{beat.pnode}-{beat.incarnation}", joined, beat.pnode)

    def _record(self, event_id: str, payload: PNodeJoined | PNodeLeft, pnode: str) -> None:
        task = asyncio.ensure_future(self._append(EventEnvelope(id=event_id, actor=self.actor, payload=payload), pnode))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def _append(self, event: EventEnvelope, pnode: str) -> None:
        try:
            await self.eventlog.append_event(self.eventlog.subjects.pnode_evt(pnode, event.type), event)
        except (nats.errors.Error, TimeoutError) as exc:
            log.warning("could not record %s for %s: %s", event.type, pnode, exc)
