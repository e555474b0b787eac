"""Request/reply APIs: each declared once as a table of typed endpoints, answered by one dispatcher.

An API (`Api`) is part of the protocol: its verbs, each with its pydantic request model; the one
reply model that every answer and every failure takes (`ok`, `error`); the subjects its server
listens on; and how the server knows who asks. The service that answers binds one handler per
verb (`Responder`: a verb without a handler, or a handler without a verb, stops it at start), and
docs/protocol.md lists the same table (tools/protocol_doc.py). Plain nats-py, not FastStream:
docs/decisions.md ("Request/reply APIs are tables of typed handlers") says why.

Who asks is read from what the server enforces, never from a field: the subject (a `<user>` token
only that user may publish on) or the reply inbox (`_INBOX.<role>.<name>.`, which only that identity
may subscribe to). A request whose reply subject is no inbox is dropped unread: nobody could be
answered, and an answer on another subject (a stream's) would be written there in the service's name.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import nats.errors
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from pydantic import BaseModel, ValidationError

from .bus_failover import TRANSIENT, BusUnavailable
from .credentials import inbox_owner
from .subjects import Subjects, is_inbox

log = logging.getLogger("computeall.responder")

AskerT = TypeVar("AskerT")
Answer = BaseModel | bytes | list[bytes]  # the API's reply model, or wire frames published in order
Handler = Callable[[Any, AskerT], Awaitable[Answer]]  # (the endpoint's request, who asks) -> the answer
STOP_WAIT_S = 30.0  # how long `stop` lets the requests in flight finish


class Refused(Exception):
    """What the asker is told, as the answer's `error`: their mistake or a refusal, not a failure of the
    service (which is logged with its traceback and answered without its details)."""


@dataclass(frozen=True)
class Endpoint:
    """One request of an API: its verb, its request model and what it does (docs/protocol.md's line)."""

    verb: str
    request: type[BaseModel]
    what: str


@dataclass(frozen=True)
class Api(Generic[AskerT]):
    """A service's request/reply API: the one table its server, its clients and its docs read."""

    service: str  # who answers, as its errors name it ("the dataset service")
    reply: type[BaseModel]  # every JSON answer; a failure is `reply(ok=False, error=...)`
    endpoints: tuple[Endpoint, ...]
    # the subjects a verb is asked on, with a wildcard where the asker's name goes
    listen: Callable[[Subjects, str], tuple[str, ...]]
    # who asks a request that came on `subject` with reply inbox `inbox`; None: nobody the API answers
    asker: Callable[[Subjects, str, str], AskerT | None]

    @property
    def verbs(self) -> list[str]:
        return [e.verb for e in self.endpoints]

    def failure(self, message: str, transient: bool = False) -> BaseModel:
        """`transient`: the bus failed the request, nothing is wrong with it (a reply that can say so does)."""
        said = {"transient": True} if transient and "transient" in self.reply.model_fields else {}
        return self.reply(ok=False, error=message, **said)


def by_inbox(subjects: Subjects, subject: str, inbox: str) -> str | None:
    """An `Api.asker`: who asks is the identity (`role:name`) whose inbox the answer goes to."""
    return inbox_owner(inbox)


class Responder(Generic[AskerT]):
    """Serves one `Api` with one handler per verb.

    `concurrent`: each request is answered in its own task (a slow one, a dataset create or a long poll,
    holds up no other), else one at a time per verb, in the order they came. `refusals`: the service's
    own exceptions whose message is the answer as it stands (`Refused` always is)."""

    def __init__(self, nc: NATS, subjects: Subjects, api: Api[AskerT], handlers: Mapping[str, Handler[AskerT]], *,
                 concurrent: bool, queue: str | None = None, refusals: tuple[type[Exception], ...] = ()) -> None:
        if set(handlers) != set(api.verbs):
            raise ValueError(f"{api.service} must answer exactly {', '.join(api.verbs)}; its handlers are "
                             f"{', '.join(handlers)}")
        self.nc = nc
        self.subjects = subjects
        self.api = api
        self.handlers = {e.verb: (e, handlers[e.verb]) for e in api.endpoints}
        self.concurrent = concurrent
        self.queue = queue
        self.refusals = (Refused, *refusals)
        self._subs: list[Subscription] = []
        self._tasks: set[asyncio.Task] = set()

    async def start(self) -> None:
        for verb in self.api.verbs:
            for subject in self.api.listen(self.subjects, verb):
                self._subs.append(await self.nc.subscribe(subject, queue=self.queue or "", cb=self._receiver(verb)))
        await self.nc.flush()  # listening once this returns: a request right after it finds a responder
        log.info("%s answers %s on %s", self.api.service, ", ".join(self.api.verbs), ", ".join(s.subject for s in self._subs))

    async def stop(self) -> None:
        """Take no more requests and let the ones in flight answer."""
        for sub in self._subs:
            await sub.unsubscribe()
        self._subs.clear()
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=STOP_WAIT_S)

    def _receiver(self, verb: str) -> Callable[[Msg], Awaitable[None]]:
        async def receive(msg: Msg) -> None:
            if not self.concurrent:
                await self._answer(verb, msg)
                return
            task = asyncio.create_task(self._answer(verb, msg))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

        return receive

    async def _answer(self, verb: str, msg: Msg) -> None:
        asker = self.api.asker(self.subjects, msg.subject, msg.reply) if is_inbox(msg.reply) else None
        if asker is None:
            log.warning("dropped a %s request on %s: its reply subject %r is no inbox of a known identity", verb,
                        msg.subject, msg.reply)
            return
        answer = await self._handle(verb, msg.data, asker)
        frames = answer if isinstance(answer, list) else [answer]
        try:
            for frame in frames:
                await self.nc.publish(msg.reply, frame if isinstance(frame, bytes) else
                                      frame.model_dump_json(exclude_none=True).encode())
        except nats.errors.Error as exc:  # the connection went away: the asker times out, the service goes on
            log.warning("could not answer a %s request: %s", verb, exc)

    async def _handle(self, verb: str, data: bytes, asker: AskerT) -> Answer:
        """The handler's answer, or the API's reply model saying why there is none: never an exception."""
        endpoint, handler = self.handlers[verb]
        try:
            return await handler(endpoint.request.model_validate_json(data or b"{}"), asker)
        except ValidationError as exc:
            return self.api.failure(f"invalid {verb} request: {describe(exc)}")
        except self.refusals as exc:
            return self.api.failure(str(exc))
        except BusUnavailable as exc:
            return self.api.failure(f"{exc}; try again in a moment", transient=True)
        except TRANSIENT as exc:  # the bus failing over: the asker asks again
            log.warning("%s: the bus failed a %s request (%s); it may be failing over", self.api.service, verb,
                        type(exc).__name__)
            return self.api.failure(f"the bus failed this {verb} request ({type(exc).__name__}); it may be failing "
                                    "over", transient=True)
        except Exception as exc:  # a bug, or the bus failing: answer anyway, keep serving
            log.exception("%s: a %s request failed", self.api.service, verb)
            return self.api.failure(f"{self.api.service} failed on this {verb} request ({type(exc).__name__}); "
                                    "see its log")


def describe(exc: ValidationError) -> str:
    """A validation error in one line: each wrong field and what is wrong with it."""
    return "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'message'}: {e['msg']}" for e in exc.errors())
