"""A user's reads of their own sessions: `<prefix>.api.<user>.<verb>` (request/reply, not recorded).

Users do not read the event log or the Object Store themselves: the log holds every user's
sessions and NATS cannot filter a stream by owner. The orchestrator answers these requests after
checking that the session is the user's, whose name is the `<user>` token of the subject (only
that user's credential may publish there). Someone else's session reads as a missing one.

    sessions   ListSessions  -> ReadsReply.sessions: the user's session ids, oldest first
    events     ReadEvents    -> ReadsReply.events: a session's events after `after_seq`, waiting up
                                to `wait_s` for the first one (a follower's long poll)
    object     ReadObject    -> the bytes of one object the session's log names (a checkpoint
                                object, or its dataset's tokenizer) as wire frames (dtype uint8,
                                digest-checked), or a ReadsReply with the error
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Literal

import nats.errors
from nats.aio.client import Client as NATS
from pydantic import BaseModel, ConfigDict, Field

from .responder import Api, Endpoint
from .subjects import Subjects, check_token
from .wire import MAGIC, Reassembler, WireError

SESSIONS = "sessions"
EVENTS = "events"
OBJECT = "object"
MAX_WAIT_S = 30.0
MAX_OBJECT_BYTES = 1 << 33  # 8 GiB: a checkpoint object of a large VNode still fits
PATIENCE_S = 60.0  # how long a read waits for an orchestrator to come back (the supervisor restarts one)


def reads_subject(subjects: Subjects, user: str, verb: str) -> str:
    return f"{subjects.prefix}.api.{check_token(user, 'user name')}.{verb}"


def reads_all(subjects: Subjects, verb: str = "*") -> str:
    """Every user's reads (of one verb): what the orchestrator subscribes to."""
    return f"{subjects.prefix}.api.*.{verb}"


def reader_of(subjects: Subjects, subject: str) -> str:
    """The user who sent a read, from its subject `<prefix>.api.<user>.<verb>` (only they may publish there)."""
    prefix = f"{subjects.prefix}.api."
    tokens = subject[len(prefix):].split(".") if subject.startswith(prefix) else []
    if len(tokens) != 2:
        raise ValueError(f"{subject} is not a read subject of prefix {subjects.prefix}")
    return tokens[0]


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ListSessions(_Request):
    """The caller's sessions."""


class ReadEvents(_Request):
    """A session's events after `after_seq`; with `wait_s`, the answer waits for the first new one."""

    session_id: str = Field(..., pattern=r"^[A-Za-z0-9_-]{1,64}$")
    after_seq: int = Field(0, ge=0)
    wait_s: float = Field(0.0, ge=0.0, le=MAX_WAIT_S)
    max_events: int = Field(1000, ge=1, le=10000)


class ReadObject(_Request):
    """One object the session's log names: a checkpoint object, or `tokenizer` for its dataset's."""

    session_id: str = Field(..., pattern=r"^[A-Za-z0-9_-]{1,64}$")
    object: str = Field(..., min_length=1, max_length=512)
    kind: Literal["checkpoint", "tokenizer"] = "checkpoint"


class RecordedEvent(BaseModel):
    seq: int
    subject: str
    data: str  # the event exactly as recorded (JSON)


class ReadsReply(BaseModel):
    ok: bool = True
    error: str | None = None
    sessions: list[str] | None = None
    events: list[RecordedEvent] | None = None
    last_seq: int | None = None  # the log's position the answer covers (follow from there)


API: Api[str] = Api("the orchestrator", ReadsReply, (  # who asks: the user of the subject
    Endpoint(SESSIONS, ListSessions, "the user's sessions"),
    Endpoint(EVENTS, ReadEvents, "a session of the user's: its events, long-polled"),
    Endpoint(OBJECT, ReadObject, "a checkpoint object or the tokenizer of a session of the user's, as tensor frames"),
), listen=lambda subjects, verb: (reads_all(subjects, verb),), asker=lambda subjects, subject, inbox: reader_of(subjects, subject))


class ReadError(RuntimeError):
    """The orchestrator refused or could not answer; the message says why."""


async def _ask(nc: NATS, subjects: Subjects, user: str, verb: str, request: BaseModel, timeout: float,
               patience_s: float = PATIENCE_S) -> ReadsReply:
    """One read; asked again while no orchestrator answers (one restarting) for up to `patience_s`."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + patience_s
    while True:
        try:
            msg = await nc.request(reads_subject(subjects, user, verb), request.model_dump_json().encode(), timeout=timeout)
            break
        except (nats.errors.NoRespondersError, nats.errors.TimeoutError):
            if loop.time() > deadline:
                raise
            await asyncio.sleep(0.5)
    reply = ReadsReply.model_validate_json(msg.data)
    if not reply.ok:
        raise ReadError(reply.error or "refused")
    return reply


async def list_sessions(nc: NATS, subjects: Subjects, user: str, timeout: float = 30.0,
                        patience_s: float = PATIENCE_S) -> list[str]:
    return (await _ask(nc, subjects, user, SESSIONS, ListSessions(), timeout, patience_s)).sessions or []


async def read_events(nc: NATS, subjects: Subjects, user: str, session_id: str, after_seq: int = 0,
                      wait_s: float = 0.0, timeout: float = 30.0) -> ReadsReply:
    request = ReadEvents(session_id=session_id, after_seq=after_seq, wait_s=wait_s)
    return await _ask(nc, subjects, user, EVENTS, request, min(timeout, 10.0) + wait_s)


async def all_events(nc: NATS, subjects: Subjects, user: str, session_id: str) -> list[RecordedEvent]:
    """Every event of the session recorded so far."""
    out: list[RecordedEvent] = []
    after = 0
    while True:
        reply = await read_events(nc, subjects, user, session_id, after)
        out += reply.events or []
        if not reply.events:
            return out
        after = reply.events[-1].seq


async def follow_events(nc: NATS, subjects: Subjects, user: str, session_id: str, poll_s: float = 20.0) -> AsyncIterator[RecordedEvent]:
    """Every event of the session from the first, then each new one as it is recorded."""
    after = 0
    while True:
        reply = await read_events(nc, subjects, user, session_id, after, wait_s=poll_s)
        for event in reply.events or []:
            yield event
            after = event.seq


async def read_object(nc: NATS, subjects: Subjects, user: str, request: ReadObject, timeout: float = 120.0) -> bytes:
    """The object's bytes, reassembled from its frames and checked against their digest."""
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    reassembler = Reassembler(max_tensor_bytes=MAX_OBJECT_BYTES, max_pending=1, ttl_s=timeout)
    try:
        await nc.publish(reads_subject(subjects, user, OBJECT), request.model_dump_json().encode(), reply=inbox)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            msg = await sub.next_msg(timeout=max(0.1, deadline - loop.time()))
            if not msg.data.startswith(MAGIC):
                reply = ReadsReply.model_validate(json.loads(msg.data))
                raise ReadError(reply.error or "refused")
            try:
                whole = reassembler.feed(msg.data)
            except WireError as exc:
                raise ReadError(f"the object arrived damaged: {exc}") from None
            if whole is not None:
                return bytes(whole.data)
    finally:
        await sub.unsubscribe()
