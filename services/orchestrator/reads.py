"""Users' reads of their own sessions (`computeall.protocol.session_reads`), answered after an
ownership check: the user is the subject's `<user>` token, which only their credential may publish.

A session is the user's who sent its first command (`<prefix>.cmd.<user>.session.<sid>`, a subject
only they may publish; the orchestrator makes that user the owner in `SessionCreated`), so a user
also reads the rejection of a create that never made a session. Someone else's session reads as a
missing one. Objects are served only when the session's own log names them (a checkpoint
object of one of its `CheckpointCommitted`, or its dataset's tokenizer), so a user cannot read
another session's weights by guessing an object name.
"""

from __future__ import annotations

import asyncio
import json

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.js.errors import BucketNotFoundError, NotFoundError, ObjectNotFoundError
from pydantic import ValidationError

from computeall.network import NetworkError, load_network
from computeall.protocol import session_reads as api
from computeall.protocol.dataset_api import session_dataset
from computeall.protocol.dataset_names import MANIFEST_FILE
from computeall.protocol.eventlog import EventLog
from computeall.protocol.events import CheckpointCommitted, DatasetCreated, EventEnvelope, SessionCreated
from computeall.protocol.responder import Refused, Responder
from computeall.protocol.subjects import Subjects, command_sender
from computeall.protocol.wire import digest, encode

QUEUE = "session-reads"


class SessionReads:
    def __init__(self, nc: NATS, eventlog: EventLog, subjects: Subjects) -> None:
        self.nc = nc
        self.eventlog = eventlog
        self.subjects = subjects
        self.owners: dict[str, str] = {}  # session id -> owner (a session's owner never changes)
        # each read in its own task: a long poll must not hold up the next request
        self.responder = Responder(nc, subjects, api.API, {api.SESSIONS: self.sessions, api.EVENTS: self.events,
                                                           api.OBJECT: self.object}, concurrent=True, queue=QUEUE)

    async def start(self) -> None:
        await self.responder.start()

    # -- ownership ------------------------------------------------------------------------
    async def owner(self, sid: str) -> str | None:
        if sid not in self.owners:
            first = await self.eventlog.read(self._commands("*", sid), batch=1, limit=1)
            if first:
                self.owners[sid] = command_sender(self.subjects, first[0].subject)[0]
        return self.owners.get(sid)

    def _commands(self, user: str, sid: str) -> str:
        return f"{self.subjects.prefix}.cmd.{user}.session.{sid}"

    async def _check(self, user: str, sid: str) -> None:
        if await self.owner(sid) != user:
            raise Refused(f"user {user} has no session {sid}; `computeall session list` shows yours")

    async def sessions(self, request: api.ListSessions, user: str) -> api.ReadsReply:
        return api.ReadsReply(sessions=await self.sessions_of(user))

    async def sessions_of(self, user: str) -> list[str]:
        """The sessions the user commanded first, oldest first (with refused creates: their status is new)."""
        sids = dict.fromkeys(command_sender(self.subjects, r.subject)[1] for r in await self.eventlog.read(self._commands(user, "*")))
        return [sid for sid in sids if await self.owner(sid) == user]

    # -- events ---------------------------------------------------------------------------
    async def events(self, request: api.ReadEvents, user: str) -> api.ReadsReply:
        await self._check(user, request.session_id)
        subject = self.subjects.session_evt_all(request.session_id)
        arrived = asyncio.Event()

        async def on_event(_: Msg) -> None:
            arrived.set()

        watch = await self.nc.subscribe(subject, cb=on_event) if request.wait_s else None
        try:
            records = await self.eventlog.read(subject, request.after_seq + 1)
            if not records and watch is not None:
                try:
                    await asyncio.wait_for(arrived.wait(), request.wait_s)
                except asyncio.TimeoutError:
                    return api.ReadsReply(events=[])
                records = await self.eventlog.read(subject, request.after_seq + 1)
        finally:
            if watch is not None:
                await watch.unsubscribe()
        budget = self.nc.max_payload // 2
        events = []
        for record in records[: request.max_events]:
            budget -= len(record.data) + 200
            if events and budget < 0:
                break  # the rest comes with the next read
            events.append(api.RecordedEvent(seq=record.seq, subject=record.subject, data=record.data.decode()))
        return api.ReadsReply(events=events)

    # -- objects --------------------------------------------------------------------------
    async def object(self, request: api.ReadObject, user: str) -> list[bytes]:
        """The object as wire frames (a refusal is the API's reply)."""
        await self._check(user, request.session_id)
        if request.kind == "tokenizer":
            data = await self._tokenizer(request.session_id)
        else:
            data = await self._checkpoint_object(request.session_id, request.object)
        return await asyncio.to_thread(encode, request.object, "uint8", [len(data)], data, self.nc.max_payload)

    async def _session_payloads(self, sid: str) -> list:
        return [_payload(r.data) for r in await self.eventlog.read(self.subjects.session_evt_all(sid))]

    async def _checkpoint_object(self, sid: str, name: str) -> bytes:
        named = {o.object: c.bucket for c in await self._session_payloads(sid) if isinstance(c, CheckpointCommitted)
                 for o in c.objects}
        if name not in named:
            raise Refused(f"session {sid}'s log names no checkpoint object {name!r}")
        return await self._get(named[name], name)

    async def _tokenizer(self, sid: str) -> bytes:
        created = next((p for p in await self._session_payloads(sid) if isinstance(p, SessionCreated)), None)
        dataset = _dataset_name(created)
        made = [_payload(r.data) for r in await self.eventlog.read(self.subjects.dataset_evt(dataset, "DatasetCreated"))]
        made = [p for p in made if isinstance(p, DatasetCreated) and p.object_store_bucket]
        if not made:
            raise Refused(f"the session's dataset {dataset} is not in the log, so its tokenizer cannot be found")
        bucket = made[-1].object_store_bucket
        manifest = json.loads(await self._get(bucket, f"{dataset}/{MANIFEST_FILE}"))
        data = await self._get(bucket, f"{dataset}/{manifest['tokenizer']['file']}")
        if digest(data) != manifest["tokenizer"]["digest"]:
            raise Refused(f"the tokenizer of dataset {dataset} does not match its digest in the manifest: it is corrupted")
        return data

    async def _get(self, bucket: str, name: str) -> bytes:
        try:
            store = await self.nc.jetstream().object_store(bucket)
            return (await store.get(name)).data
        except BucketNotFoundError:
            raise Refused(f"the bucket {bucket} is gone from this NATS server") from None
        except (ObjectNotFoundError, NotFoundError):
            raise Refused(f"object {name} is missing from bucket {bucket}") from None


def _payload(data: bytes):
    try:
        return EventEnvelope.model_validate_json(data).payload
    except ValidationError:
        return None  # a type this build does not know


def _dataset_name(created: SessionCreated | None) -> str:
    if created is None:
        raise Refused("the session has no SessionCreated")
    try:
        vocab = load_network(created.config.network_yaml).vocab_size
    except NetworkError as exc:
        raise Refused(f"the session's network does not load: {exc}") from None
    return session_dataset(created.config.data, vocab, created.owner)
