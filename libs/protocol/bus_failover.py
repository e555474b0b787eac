"""Riding out a failover of the bus: a JetStream call tried again while the servers recover.

When one server of a clustered bus dies, its clients reconnect to another and every RAFT group it
led (a stream, a consumer, JetStream's metadata) elects a new leader. For a few seconds calls get
no responders, a 503 or no answer at all. Those are tried again, with a growing pause, until the
bus has made no progress for `patience_s`; then `BusUnavailable`, which callers treat as a bus
that is still down (try again later), never as a fault of what they were doing. Retrying is safe
for what goes through here: appends carry a `Nats-Msg-Id`, so one that did land before its answer
was lost is dropped as a duplicate, and reads go on from the last message they got.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Awaitable, Callable, TypeVar

import nats.errors
from nats.js.errors import NoStreamResponseError, ServiceUnavailableError

log = logging.getLogger("computeall.bus")

T = TypeVar("T")
PATIENCE_S = 30.0  # a leader election takes a few seconds; a reconnect up to the client's reconnect wait
# nats-server's longest RAFT election timeout (server/raft.go, not configurable): a follower campaigns 4-9 s
# after its leader went silent, so a stream whose leader's machine died takes appends again within about this
ELECTION_MAX_S = 9.0
# One try of a call these helpers repeat: a request that reached a leader dying or being elected gets no answer,
# and nats-py's own 5 s would hold a takeover that long after the new leader is in (every try is safe to repeat)
TRY_S = 2.0

TRANSIENT = (
    nats.errors.NoRespondersError,
    NoStreamResponseError,
    ServiceUnavailableError,
    nats.errors.TimeoutError,
    asyncio.TimeoutError,
)


class BusUnavailable(nats.errors.TimeoutError):
    """The bus made no progress on a call for the whole patience. A timeout of the bus, as every
    handler of one already knows it (it is a `nats.errors.TimeoutError`): the caller gives up on this
    try and takes the work up again later, from the log."""

    def __init__(self, what: str, patience_s: float, last: BaseException) -> None:
        super().__init__()
        self.what = what
        self.patience_s = patience_s
        self.last = last

    def __str__(self) -> str:
        return (f"{self.what}: the bus made no progress for {self.patience_s:.0f}s (last: {type(self.last).__name__}); "
                "it may still be failing over")


class Patience:
    """How long one call may go on failing: `patience_s` since it last made progress."""

    def __init__(self, what: str, patience_s: float = PATIENCE_S) -> None:
        self.what = what
        self.patience_s = patience_s
        self.progressed()

    def progressed(self) -> None:
        """The bus answered with something new: the patience starts again."""
        self._deadline = time.monotonic() + self.patience_s
        self._pause = 0.1

    async def wait(self, exc: BaseException) -> None:
        """After a transient failure: a growing pause before the next try, or `BusUnavailable` when
        the next try would come after the patience ran out."""
        if time.monotonic() + self._pause > self._deadline:
            raise BusUnavailable(self.what, self.patience_s, exc) from exc
        log.info("%s: %s; the bus may be failing over, trying again in %.1fs", self.what, type(exc).__name__, self._pause)
        await asyncio.sleep(self._pause)
        self._pause = min(2.0, self._pause * 2)


async def through_failover(call: Callable[[], Awaitable[T]], what: str, patience_s: float = PATIENCE_S) -> T:
    """`await call()`, again while the bus fails over (`BusUnavailable` after `patience_s`)."""
    patience = Patience(what, patience_s)
    while True:
        try:
            return await call()
        except TRANSIENT as exc:
            await patience.wait(exc)
