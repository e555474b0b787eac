"""PNodeJoined and PNodeLeft, recorded from the PNodes' heartbeats, and each joining PNode's memory cap.

A PNode appends nothing to the log (its credential cannot): its first heartbeat of a process
start (a new `incarnation`) makes it joined, its last one (`left`) makes it gone. Every
orchestrator may see the same heartbeat, so each event's id is derived from the PNode and its
incarnation and JetStream drops the second copy.

What a PNode offers is its word; what it may be given is its credential's: when it joins, the
authority is asked for its cap (`membership_api.pnode_memory`), the registry counts on no more
(`PNodeRegistry.admit`), and `PNodeJoined` records the capped memory, with the claim beside it
when it was more. Where no authority answers (docker-compose) the default cap applies.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Awaitable, Callable

import nats.errors
from nats.aio.client import Client as NATS

from computeall.protocol import membership_api
from computeall.protocol.eventlog import EventLog
from computeall.protocol.events import EventEnvelope, PNodeJoined, PNodeLeft
from computeall.protocol.subjects import Subjects
from computeall.protocol.telemetry import Heartbeat

from .pnodes import PNodeRegistry

log = logging.getLogger("computeall.orchestrator.membership")

MemoryCap = Callable[[str], Awaitable[int]]  # pnode -> the most it may offer, in bytes


def ask_authority(nc: NATS, subjects: Subjects) -> MemoryCap:
    """Each PNode's cap from the authority; the default where none answers (no authority: docker-compose)."""
    async def cap(pnode: str) -> int:
        try:
            return await membership_api.pnode_memory(nc, subjects, pnode)
        except (nats.errors.Error, TimeoutError, membership_api.MembershipError) as exc:
            log.info("no memory cap for %s from an authority (%s): the default, %d GiB, applies", pnode,
                     type(exc).__name__, membership_api.DEFAULT_PNODE_MEMORY >> 30)
            return membership_api.DEFAULT_PNODE_MEMORY

    return cap


@dataclass(eq=False)
class MembershipRecorder:
    eventlog: EventLog
    actor: str
    registry: PNodeRegistry
    memory_cap: MemoryCap
    # (pnode, incarnation) recorded by this orchestrator
    _joined: set[tuple[str, str]] = field(default_factory=set, init=False)
    _pending: set[asyncio.Task] = field(default_factory=set, init=False)

    def beat(self, beat: Heartbeat) -> None:
        """Called for every heartbeat; records in the background, never delaying the caller."""
        key = (beat.pnode, beat.incarnation)
        if beat.left:
            self._joined.discard(key)
            left = PNodeLeft(pnode=beat.pnode)
            self._background(self._append(f"left-{beat.pnode}-{beat.incarnation}", left, beat.pnode))
        elif key not in self._joined:
            self._joined.add(key)
            self._background(self._join(beat))

    async def _join(self, beat: Heartbeat) -> None:
        cap = await self.memory_cap(beat.pnode)
        self.registry.admit(beat.pnode, beat.incarnation, cap)
        if beat.memory_bytes > cap:
            log.warning("pnode %s offers %d bytes; its credential allows %d: counted at that", beat.pnode,
                        beat.memory_bytes, cap)
        joined = PNodeJoined(pnode=beat.pnode, host=beat.host, os_pid=beat.os_pid, device=beat.device,
                             memory_bytes=min(beat.memory_bytes, cap), throughput=beat.throughput,
                             offered_bytes=beat.memory_bytes if beat.memory_bytes > cap else None)
        await self._append(f"joined-{beat.pnode}-{beat.incarnation}", joined, beat.pnode)

    def _background(self, work: Awaitable[None]) -> None:
        task = asyncio.ensure_future(work)
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def _append(self, event_id: str, payload: PNodeJoined | PNodeLeft, pnode: str) -> None:
        event = EventEnvelope(id=event_id, actor=self.actor, payload=payload)
        try:
            await self.eventlog.append_event(self.eventlog.subjects.pnode_evt(pnode, event.type), event)
        except (nats.errors.Error, TimeoutError) as exc:
            log.warning("could not record %s for %s: %s", event.type, pnode, exc)
