"""Requests to PNodes with deadlines tied to their heartbeats: never wait forever on a dead one, nor
on messages lost with a nats-server."""

from __future__ import annotations

import asyncio
import time
from typing import Awaitable, Callable

import nats.errors
from nats.aio.client import Client as NATS
from pydantic import BaseModel

from computeall.protocol.pnode_api import PNodeReply
from computeall.protocol.subjects import Subjects
from computeall.protocol.telemetry import HEARTBEAT_INTERVAL_S

from .errors import PNodeFailure, SessionError, StepStalled
from .pnodes import PNodeRegistry

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
        reply = PNodeReply.model_validate_json(msg.data)
        if reply.state_lost:  # it restarted before its new heartbeat reached us: lost, as if silent
            raise PNodeFailure([pnode], f"lost {pnode} (restarted, its state is gone: {reply.error})")
        if not reply.ok:
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
        stall_s: float | None = None,
    ) -> list[PNodeReply]:
        """One request per PNode, answered in order; `PNodeFailure` as soon as one of them goes silent
        or restarts (its generation differs from `generations`: the state it held is gone), and
        `StepStalled` when some are still unanswered `stall_s` after both the start and a reconnect to
        the bus seen since (or up to `stall_s` before) the start: their messages were lost with a server."""
        tasks = {pnode: asyncio.ensure_future(self.one(pnode, make(pnode), timeout)) for pnode in pnodes}
        started = time.monotonic()
        reported: set[str] = set()
        try:
            while True:
                done, pending = await asyncio.wait(tasks.values(), timeout=0.25, return_when=asyncio.FIRST_EXCEPTION)
                for task in done:
                    if task.exception():
                        raise task.exception()
                if not pending:
                    return [tasks[p].result() for p in pnodes]
                waiting = [p for p, t in tasks.items() if not t.done()]
                silent = [p for p in waiting if not self.registry.is_live(p)]
                if silent:
                    raise PNodeFailure(silent, f"lost {', '.join(silent)} (no heartbeat for {self.registry.timeout_s:.0f}s)")
                restarted = [p for p in pnodes if generations and self.registry.generation(p) != generations.get(p)]
                if restarted:
                    raise PNodeFailure(restarted, f"lost {', '.join(restarted)} (restarted, its state is gone)")
                disturbed = self.registry.disturbed_at
                if stall_s and disturbed > started - stall_s and time.monotonic() - max(started, disturbed) > stall_s:
                    raise StepStalled(f"{', '.join(waiting)} did not answer {stall_s:.1f}s after a connection to the bus "
                                      "was made again: messages were lost with a nats-server")
                elapsed = time.monotonic() - started
                if on_slow and slow_after_s and elapsed > slow_after_s:
                    for p in set(waiting) - reported:
                        reported.add(p)
                        await on_slow(p, elapsed)
        finally:
            for task in tasks.values():
                if not task.done():
                    task.cancel()
