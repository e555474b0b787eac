"""The event log: CA_LOG and CA_TEL setup, appends with optimistic concurrency, reads.

Appends to a session use `Nats-Expected-Last-Subject-Sequence` together with
`Nats-Expected-Last-Subject-Sequence-Subject: <prefix>.evt.session.<sid>.>`, so the
expected sequence covers all event types of that session and two writers can never
both extend one session.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import nats.errors
from nats.js import JetStreamContext
from nats.js.api import ConsumerConfig, DeliverPolicy, AckPolicy, DiscardPolicy, StorageType, StreamConfig
from nats.js.errors import APIError, BadRequestError, NotFoundError

from .commands import CommandEnvelope
from .bus_failover import PATIENCE_S, TRANSIENT, Patience, through_failover
from .events import EventEnvelope
from .limits import COMMAND_BYTES
from .subjects import LOG_STREAM, TEL_STREAM, Subjects


FETCH_S = 5.0  # the log's messages come at once: a fetch that waits this long was cut off
NO_MESSAGE = 10037  # JetStream's error code for "no message found"
GETS_BEFORE_A_CONSUMER = 16  # a read spanning fewer sequence numbers gets them one by one, with no consumer


class ConcurrencyError(RuntimeError):
    """Another writer appended to the session first."""


class CommandTooLarge(ValueError):
    """A command over `limits.COMMAND_BYTES`; the message says by how much."""


@dataclass
class Recorded:
    seq: int
    subject: str
    data: bytes


async def ensure_streams(js: JetStreamContext, subjects: Subjects, tel_max_age_s: float = 3600.0,
                         replicas: int = 1) -> None:
    """Create CA_LOG (kept forever, dedup window) and CA_TEL (bounded) if missing, at `replicas` copies
    (`bus.replicas`); an existing stream takes the config, so a bus grown to 3 servers gets 3 copies."""
    log = StreamConfig(
        name=LOG_STREAM,
        subjects=subjects.log_subjects(),
        storage=StorageType.FILE,
        duplicate_window=120.0,
        max_msg_size=1 << 20,
        num_replicas=replicas,
    )
    tel = StreamConfig(
        name=TEL_STREAM,
        subjects=subjects.tel_subjects(),
        storage=StorageType.FILE,
        max_age=tel_max_age_s,
        max_bytes=256 << 20,
        discard=DiscardPolicy.OLD,
        num_replicas=replicas,
    )
    for config in (log, tel):
        async def create_or_update(config: StreamConfig = config) -> None:
            try:
                await js.add_stream(config)
            except BadRequestError:
                await js.update_stream(config)

        await through_failover(create_or_update, f"setting up {config.name}")


class EventLog:
    def __init__(self, js: JetStreamContext, subjects: Subjects, patience_s: float = PATIENCE_S) -> None:
        self.js = js
        self.subjects = subjects
        self.patience_s = patience_s  # how long a read may go on without progress (`bus_failover.Patience`)

    async def append_session_event(self, event: EventEnvelope, expected_seq: int | None) -> int:
        """Append one session event; `expected_seq` is the last sequence of that session's events (0: none)."""
        sid = event.session_id
        assert sid, "session events carry a session id"
        headers = {"Nats-Msg-Id": event.id}
        if expected_seq is not None:
            headers["Nats-Expected-Last-Subject-Sequence"] = str(expected_seq)
            headers["Nats-Expected-Last-Subject-Sequence-Subject"] = self.subjects.session_evt_all(sid)
        subject, data = self.subjects.session_evt(sid, event.type), event.model_dump_json().encode()
        try:
            ack = await through_failover(lambda: self.js.publish(subject, data, headers=headers), f"appending {event.type}")
        except APIError as exc:
            if exc.err_code == 10071:  # wrong last sequence
                raise ConcurrencyError(f"session {sid} was extended by another writer") from None
            raise
        return ack.seq

    async def append_event(self, subject: str, event: EventEnvelope) -> int:
        """Append an event that needs no concurrency check (PNode and dataset events)."""
        data = event.model_dump_json().encode()
        ack = await through_failover(lambda: self.js.publish(subject, data, headers={"Nats-Msg-Id": event.id}),
                                     f"appending {event.type}")
        return ack.seq

    async def publish_command(self, command: CommandEnvelope) -> int:
        """Record a command on its actor's subject (the orchestrator believes the subject, and
        refuses a command whose actor differs); a repeated id is dropped by the duplicate window.
        Raises `CommandTooLarge` rather than send what the orchestrator would refuse unread."""
        sid = command.session_id
        assert sid, "session commands carry a session id"
        data = command.model_dump_json().encode()
        if len(data) > COMMAND_BYTES:
            raise CommandTooLarge(
                f"the {command.type} command is {len(data):,} bytes; a command may have at most {COMMAND_BYTES:,} "
                "(see the limits in docs/protocol.md)"
            )
        ack = await through_failover(
            lambda: self.js.publish(self.subjects.session_cmd(sid, command.actor), data, headers={"Nats-Msg-Id": command.id}),
            f"recording {command.type}")
        return ack.seq

    async def read(self, filter_subject: str, start_seq: int = 1, batch: int = 512,
                   stream: str = LOG_STREAM, limit: int | None = None) -> list[Recorded]:
        """Every message on `filter_subject` from `start_seq` up to the last one recorded when the read
        began (at most `limit`), in log order (or `stream`'s).

        Never short. The end is asked of the stream's leader (its last message on the subject), not of
        the consumer that reads: an ephemeral consumer has one replica, which a failover takes away and
        a server that has just rejoined serves from a store still catching up. A read cut off before
        the end (a fetch that times out, a consumer gone with its server) goes on from the message after
        the last one it got, on a fresh consumer, as long as the bus keeps making progress
        (`Patience`); `BusUnavailable` when it made none for the whole patience.

        A read of at most `GETS_BEFORE_A_CONSUMER` of the stream's sequence numbers asks the stream's leader
        for its messages one by one, with no consumer: most reads are a session catching up on its last few
        events, and a consumer is created and deleted by JetStream's meta leader, whose election after a
        lost server can outlast the stream's own (the standby's claim waited for it). A longer read takes
        a consumer, as one request per message would take longer."""
        patience = Patience(f"reading {filter_subject} from {stream}", self.patience_s)
        out: list[Recorded] = []
        end: int | None = None
        while True:
            try:
                if end is None:
                    end = await self._last_seq(stream, filter_subject)
                first = out[-1].seq + 1 if out else max(1, start_seq)
                if first > end or (limit is not None and len(out) >= limit):
                    return out
                if end - first < GETS_BEFORE_A_CONSUMER:
                    record = await self._get_next(filter_subject, stream, first)
                    if record is None or record.seq > end:
                        return out  # none left up to the end: removed since the end was asked
                    out.append(record)
                    patience.progressed()
                    continue
                await self._read_span(filter_subject, stream, first, end, batch, limit, out, patience)
            except TRANSIENT as exc:
                await patience.wait(exc)

    async def _last_seq(self, stream: str, filter_subject: str) -> int:
        """The sequence of the last message on `filter_subject` (0: none), as the stream's leader knows it
        (`STREAM.MSG.GET`, never a direct get, which any replica may answer)."""
        try:
            return (await self.js.get_last_msg(stream, filter_subject, direct=False)).seq
        except NotFoundError as exc:
            if exc.err_code == NO_MESSAGE:
                return 0
            raise

    async def _get_next(self, filter_subject: str, stream: str, first: int) -> Recorded | None:
        """The first message on `filter_subject` at `first` or later, from the stream's leader (None: none)."""
        try:
            msg = await self.js.get_msg(stream, seq=first, subject=filter_subject, next=True)
        except NotFoundError as exc:
            if exc.err_code == NO_MESSAGE:
                return None
            raise
        return Recorded(msg.seq, msg.subject, msg.data or b"")

    async def _read_span(self, filter_subject: str, stream: str, first: int, end: int, batch: int, limit: int | None,
                         out: list[Recorded], patience: Patience) -> None:
        """Append to `out`, from one fresh consumer starting at `first`, until a message at `end` or later
        (or `limit` in all); a fetch that gets nothing within `FETCH_S` raises, with what it got kept."""
        config = ConsumerConfig(
            filter_subject=filter_subject,
            deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
            opt_start_seq=first,
            ack_policy=AckPolicy.NONE,
            inactive_threshold=30.0,  # what a read cut off leaves behind goes by itself
        )
        sub = await self.js.pull_subscribe(filter_subject, stream=stream, config=config)
        finished = False
        last = first - 1
        try:
            while last < end and (limit is None or len(out) < limit):
                wanted = min(batch, end - last, limit - len(out) if limit is not None else batch)
                msgs = await sub.fetch(wanted, timeout=FETCH_S)
                out.extend(Recorded(m.metadata.sequence.stream, m.subject, m.data) for m in msgs)
                last = out[-1].seq
                patience.progressed()
            finished = True
        finally:
            try:
                await sub.unsubscribe()
                if finished:
                    # deleted now, not after its inactive threshold: a stream holds at most 1000 consumers
                    # (nats-server 2.15's default), and a fast session reads the log many times a second.
                    # One cut off is left to its threshold: its server may be the one that is gone.
                    await self.js.delete_consumer(stream, config.name)
            except (NotFoundError, nats.errors.Error):
                pass

    async def follow(self, filter_subject: str) -> AsyncIterator[Recorded]:
        """Every message on `filter_subject` from the start of the log, then new ones as they come."""
        sub = await self.js.subscribe(
            filter_subject, stream=LOG_STREAM, ordered_consumer=True, deliver_policy=DeliverPolicy.ALL
        )
        try:
            async for msg in sub.messages:
                yield Recorded(msg.metadata.sequence.stream, msg.subject, msg.data)
        finally:
            try:
                await sub.unsubscribe()
            except nats.errors.Error:
                pass  # the connection is already closed
