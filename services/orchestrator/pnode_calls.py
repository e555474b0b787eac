"""Requests to PNodes with deadlines tied to their heartbeats and to what each kind of request takes:
never wait forever on a dead PNode, on one that heartbeats but does not answer, nor on messages lost
with a nats-server (`stalls.py` says how long is too long, and whose fault it is)."""

from __future__ import annotations

import asyncio
import time
from typing import Awaitable, Callable

import nats.errors
from nats.aio.client import Client as NATS
from pydantic import BaseModel, ValidationError

from computeall.protocol.pnode_api import PNodeReply
from computeall.protocol.subjects import Subjects
from computeall.protocol.telemetry import HEARTBEAT_INTERVAL_S

from .errors import PNodeFailure, SessionError, StepStalled, Unanswered
from .pnodes import PNodeRegistry
from .stalls import Allowance

OnSlow = Callable[[str, float], Awaitable[None]]
# A PNode whose nats-server died hears nothing until it has reconnected to another (well under a
# second); one nobody hears for two heartbeats is dead.
NOT_LISTENING_S = 2 * HEARTBEAT_INTERVAL_S


class PNodeCalls:
    def __init__(self, nc: NATS, subjects: Subjects, registry: PNodeRegistry, request_timeout_s: float = 600.0) -> None:
        self.nc = nc
        self.subjects = subjects
        self.registry = registry
        self.request_timeout_s = request_timeout_s

    async def one(self, pnode: str, request: BaseModel, timeout: float | None = None) -> PNodeReply:
        """Its reply; a pass that gave up waiting for its inputs (`starved`) is returned as it is, for
        `all` to weigh against the others' replies."""
        give_up = time.monotonic() + NOT_LISTENING_S
        while True:
            try:
                msg = await self.nc.request(self.subjects.pnode_ctl(pnode), request.model_dump_json().encode(),
                                            timeout=timeout or self.request_timeout_s)
                break
            except nats.errors.NoRespondersError:  # nobody got it: asking again is safe
                if time.monotonic() >= give_up:
                    self.registry.not_listening(pnode)
                    raise PNodeFailure([pnode], f"pnode {pnode} is not listening (it died)") from None
                await asyncio.sleep(0.2)
            except (nats.errors.TimeoutError, asyncio.TimeoutError):
                raise PNodeFailure([pnode], f"pnode {pnode} did not answer {request.type} in time") from None
        try:
            reply = _reply_of(pnode, request, msg.data)
        except PNodeFailure:
            self.registry.misbehaved(pnode)  # what it computed cannot be trusted to be what was asked
            raise
        if reply.state_lost:  # it restarted before its new heartbeat reached us: lost, as if silent
            raise PNodeFailure([pnode], f"lost {pnode} (restarted, its state is gone: {reply.error})")
        if not reply.ok and not reply.starved:
            raise SessionError(f"pnode {pnode} failed {request.type}: {reply.error}")
        return reply

    async def all(
        self,
        pnodes: list[str],
        make: Callable[[str], BaseModel],
        timeout: float | None = None,
        slow_after_s: float | None = None,
        on_slow: OnSlow | None = None,
        generations: dict[str, int] | None = None,
        allowance: Allowance | None = None,
    ) -> list[PNodeReply]:
        """One request per PNode, answered in order. `PNodeFailure` as soon as one of them goes silent
        or restarts (its generation differs from `generations`: the state it held is gone). A PNode that
        answers with an error (`SessionError`) is raised once every other has answered: what follows
        (an older checkpoint, a fresh plan) must not race a request still running on another PNode. With
        an `allowance`: `StepStalled` when some are still unanswered `reconnect_s` after both the start and
        a reconnect to the bus seen since (or shortly before) the start, their messages lost with a
        server, or when all answered and some passes starved; `Unanswered` for those that heartbeat but
        have not answered `answer_s` after the start, with no reconnect to excuse them."""
        tasks = {pnode: asyncio.ensure_future(self.one(pnode, make(pnode), timeout)) for pnode in pnodes}
        started = time.monotonic()
        reported: set[str] = set()
        try:
            while True:
                answered = [t for t in tasks.values() if t.done()]
                for task in answered:
                    if task.exception() and not isinstance(task.exception(), SessionError):
                        raise task.exception()
                waiting = [p for p, t in tasks.items() if not t.done()]
                if not waiting:
                    for task in answered:
                        if task.exception():
                            raise task.exception()
                    replies = [tasks[p].result() for p in pnodes]
                    if starved := [r for r in replies if r.starved]:
                        raise StepStalled("; ".join(f"{r.pnode}: {r.error}" for r in starved))
                    return replies
                silent = [p for p in waiting if not self.registry.is_live(p)]
                if silent:
                    raise PNodeFailure(silent, f"lost {', '.join(silent)} (no heartbeat for {self.registry.timeout_s:.0f}s)")
                restarted = [p for p in pnodes if generations and self.registry.generation(p) != generations.get(p)]
                if restarted:
                    raise PNodeFailure(restarted, f"lost {', '.join(restarted)} (restarted, its state is gone)")
                if allowance:
                    self._check_deadlines(waiting, started, allowance)
                elapsed = time.monotonic() - started
                if on_slow and slow_after_s and elapsed > slow_after_s:
                    for p in set(waiting) - reported:
                        reported.add(p)
                        await on_slow(p, elapsed)
                await asyncio.wait([tasks[p] for p in waiting], timeout=0.25, return_when=asyncio.FIRST_EXCEPTION)
        finally:
            for task in tasks.values():
                if not task.done():
                    task.cancel()

    def _check_deadlines(self, waiting: list[str], started: float, allowance: Allowance) -> None:
        now, disturbed = time.monotonic(), self.registry.disturbed_at
        reconnect = allowance.reconnect_s
        if reconnect and disturbed > started - reconnect and now - max(started, disturbed) > reconnect:
            raise StepStalled(f"{', '.join(waiting)} did not answer {reconnect:.1f}s after a connection to the bus "
                              "was made again: messages were lost with a nats-server")
        if now - started <= allowance.answer_s:
            return
        if disturbed > started - allowance.answer_s:  # messages may have been lost: nobody's fault
            raise StepStalled(f"{', '.join(waiting)} did not answer within {allowance.answer_s:.1f}s, "
                              "and a connection to the bus was made again meanwhile")
        for pnode in waiting:
            self.registry.unresponsive(pnode)
        raise Unanswered(waiting, f"{', '.join(waiting)} heartbeat but did not answer within {allowance.answer_s:.1f}s "
                                  "(a few times what such a request takes): treated as lost")


def _reply_of(pnode: str, request: BaseModel, data: bytes) -> PNodeReply:
    """A PNode's reply, which must parse and be its own: a PNode answering for another, or with
    nonsense, is treated as lost."""
    try:
        reply = PNodeReply.model_validate_json(data)
    except ValidationError as exc:
        raise PNodeFailure([pnode], f"pnode {pnode} answered {request.type} with a malformed reply: "
                                    f"{exc.errors()[:2]}") from None
    if reply.pnode != pnode:
        raise PNodeFailure([pnode], f"pnode {pnode} answered {request.type} as {reply.pnode!r}")
    return reply
