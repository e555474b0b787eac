"""Durable JetStream consumers on CA_LOG and CA_TEL feeding the projector, plus heartbeats.

Ack policy, chosen on purpose: `AckPolicy.ALL`, acked after the batch's transaction committed.
The truth about what is projected is the position in DuckDB, not the server's ack floor: on
start (and after any write failure) the durable consumer is recreated to begin right after the
stored position, and a redelivered message at or below it is skipped. Acking only the last
message of a batch keeps the ack traffic to one message per batch.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

import nats.errors
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from nats.js.errors import NotFoundError
from pydantic import ValidationError

from computeall.protocol.subjects import LOG_STREAM, TEL_STREAM, Subjects, pnode_of
from computeall.protocol.telemetry import HEARTBEAT_INTERVAL_S, Heartbeat

from . import store
from .db import Database
from .projector import Message, project
from .pubsub import PubSub

log = logging.getLogger(__name__)

DURABLE = "monitor"


@dataclass
class IngestStats:
    positions: dict[str, int] = field(default_factory=dict)
    ingested: int = 0


@dataclass(eq=False)
class Ingestor:
    db: Database
    nc: NATS
    js: JetStreamContext
    subjects: Subjects
    pubsub: PubSub
    # Bounds what is in flight (max_ack_pending is 4x this), not what a batch waits for: a batch is
    # whatever arrived while the previous one was written. Large bounds let each DuckDB
    # transaction take many rows at once under load (13,000 -> 21,000 events/s measured).
    batch_size: int = 32768
    stats: IngestStats = field(default_factory=IngestStats, init=False)
    _progress: asyncio.Condition = field(default_factory=asyncio.Condition, init=False)
    _heartbeats: dict[str, Heartbeat] = field(default_factory=dict, init=False)
    _tasks: list[asyncio.Task] = field(default_factory=list, init=False)
    _hb_sub: Subscription | None = field(default=None, init=False)

    async def start(self) -> None:
        self.stats.positions = await self.db.read(store.positions)
        self._hb_sub = await self.nc.subscribe(self.subjects.heartbeat_all(), cb=self._on_heartbeat)
        for stream in (LOG_STREAM, TEL_STREAM):
            self._tasks.append(asyncio.create_task(self._consume(stream), name=f"ingest-{stream}"))
        self._tasks.append(asyncio.create_task(self._flush_heartbeats(), name="ingest-heartbeats"))

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        if self._hb_sub is not None:
            try:
                await self._hb_sub.unsubscribe()
            except nats.errors.Error:
                pass
            self._hb_sub = None

    async def wait_for(self, stream: str, seq: int, timeout: float) -> None:
        """Until every message of `stream` up to `seq` is committed."""
        async with self._progress:
            await asyncio.wait_for(
                self._progress.wait_for(lambda: self.stats.positions.get(stream, 0) >= seq), timeout
            )

    async def _on_heartbeat(self, msg: Msg) -> None:
        try:
            hb = Heartbeat.model_validate_json(msg.data)
            if hb.pnode != pnode_of(self.subjects, msg.subject):  # only that PNode may publish there
                raise ValueError(f"it names PNode {hb.pnode!r}")
        except (ValidationError, ValueError):
            log.debug("ignoring a heartbeat on %s", msg.subject)
            return
        self._heartbeats[hb.pnode] = hb

    async def _flush_heartbeats(self) -> None:
        """Heartbeats ride along with the event log's commits; when the log is quiet (no session
        running) they are written on their own every interval, or every PNode would read as lost."""
        while True:
            await asyncio.sleep(HEARTBEAT_INTERVAL_S)
            if not self._heartbeats:
                continue
            heartbeats, self._heartbeats = list(self._heartbeats.values()), {}
            try:
                await self.db.write(self._apply, [], heartbeats)
            except Exception:
                log.exception("writing %d heartbeats failed", len(heartbeats))
                continue
            self.pubsub.publish("pnodes", {"type": "Heartbeat"})

    async def _consume(self, stream: str) -> None:
        while True:
            try:
                await self._pump(stream)
            except asyncio.CancelledError:
                raise
            except Exception:
                # a failed transaction rolled back: start over from the committed position
                log.exception("ingesting %s failed; resuming from the stored position", stream)
                await asyncio.sleep(1.0)

    async def _pump(self, stream: str) -> None:
        """Push consumer with flow control. nats-py's pull `fetch` costs a task per message and
        tops out near 10,000 messages/s; a push callback that only appends to a buffer is ~10x
        faster. The buffer fills while the previous batch is written, and `max_ack_pending`
        bounds it: the server stops delivering until a batch's last message is acked."""
        name = f"{DURABLE}_{stream}"
        try:
            await self.js.delete_consumer(stream, name)
        except NotFoundError:
            pass
        config = ConsumerConfig(
            durable_name=name,
            deliver_subject=self.nc.new_inbox(),
            deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
            opt_start_seq=self.stats.positions.get(stream, 0) + 1,
            ack_policy=AckPolicy.ALL,
            ack_wait=60.0,
            max_ack_pending=4 * self.batch_size,
            flow_control=True,
            idle_heartbeat=5.0,
        )
        await self.js.add_consumer(stream, config)
        buffer: list[Msg] = []
        arrived = asyncio.Event()

        async def on_message(msg: Msg) -> None:
            buffer.append(msg)
            arrived.set()

        sub = await self.js.subscribe_bind(
            stream, config, name, cb=on_message, manual_ack=True, pending_msgs_limit=8 * self.batch_size
        )
        done = self.stats.positions.get(stream, 0)
        try:
            while True:
                try:
                    await asyncio.wait_for(arrived.wait(), 1.0)
                except asyncio.TimeoutError:
                    if stream == LOG_STREAM and self._heartbeats:
                        await self._commit(stream, [])
                    continue
                arrived.clear()
                msgs, buffer[:] = buffer[:], []
                messages = [
                    Message(stream, m.metadata.sequence.stream, m.subject, m.data)
                    for m in msgs
                    if m.metadata.sequence.stream > done
                ]
                await self._commit(stream, messages)
                done = max(done, msgs[-1].metadata.sequence.stream)
                await msgs[-1].ack()
        finally:
            try:
                await sub.unsubscribe()
            except nats.errors.Error:
                pass

    async def _commit(self, stream: str, messages: list[Message]) -> None:
        heartbeats = []
        if stream == LOG_STREAM:
            heartbeats, self._heartbeats = list(self._heartbeats.values()), {}
        batch = await self.db.write(self._apply, messages, heartbeats)
        for topic, item in batch.notices:
            self.pubsub.publish(topic, item)
        if heartbeats:
            self.pubsub.publish("pnodes", {"type": "Heartbeat"})
        async with self._progress:
            self.stats.positions.update(batch.positions)
            self.stats.ingested += len(messages)
            self._progress.notify_all()

    def _apply(self, con, messages: list[Message], heartbeats: list[Heartbeat]):
        # projecting runs on the writer thread too: it is CPU work the event loop should not do
        batch = project(messages)
        store.apply(self.db, con, batch, heartbeats)
        return batch
