"""Answers `<prefix>.mon.<verb>` requests (see `computeall.protocol.monitor_api`).

A handler is told who asks: the identity whose inbox the reply goes to (`credentials.inbox_owner`),
never a field of the request. A request with no such inbox is not handled: nobody would get the answer."""

from __future__ import annotations

import logging
from typing import Awaitable, Callable

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from pydantic import BaseModel, ValidationError

from computeall.protocol import monitor_api as api
from computeall.protocol.credentials import inbox_owner
from computeall.protocol.subjects import Subjects

log = logging.getLogger(__name__)

Handler = Callable[[BaseModel, str], Awaitable[api.MonitorReply]]  # (request, who asks: `role:name`)


async def serve(nc: NATS, subjects: Subjects, handlers: dict[str, tuple[type[BaseModel], Handler]]) -> list:
    subs = []
    for verb, (model, handler) in handlers.items():
        subs.append(await nc.subscribe(api.monitor_subject(subjects, verb), cb=_responder(model, handler)))
    return subs


def _responder(model: type[BaseModel], handler: Handler) -> Callable[[Msg], Awaitable[None]]:
    async def respond(msg: Msg) -> None:
        asker = inbox_owner(msg.reply)
        if asker is None:
            return
        try:
            request = model.model_validate_json(msg.data or b"{}")
            reply = await handler(request, asker)
        except ValidationError as exc:
            reply = api.MonitorReply(ok=False, error=f"bad request on {msg.subject}: {exc}")
        except Exception as exc:  # the requester gets an answer; the monitor keeps running
            log.exception("handling %s failed", msg.subject)
            reply = api.MonitorReply(ok=False, error=f"{type(exc).__name__}: {exc}")
        await msg.respond(reply.model_dump_json(exclude_none=True).encode())

    return respond
