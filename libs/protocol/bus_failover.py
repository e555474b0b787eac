"""Riding out a failover of the bus: a JetStream call tried again while the servers recover.

When one server of a clustered bus dies, its clients reconnect to another and every RAFT group it
led (a stream, a consumer, JetStream's metadata) elects a new leader. For a few seconds calls get
no responders, a 503 or no answer at all. Those are tried again, with a growing pause, for up to
`patience_s`; anything else, and a bus still down after that, is the caller's to handle. Retrying
is safe for what goes through here: appends carry a `Nats-Msg-Id`, so one that did land before its
answer was lost is dropped as a duplicate, and reads start again from the same place.
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

TRANSIENT = (
    nats.errors.NoRespondersError,
    NoStreamResponseError,
    ServiceUnavailableError,
    nats.errors.TimeoutError,
    asyncio.TimeoutError,
)


async def through_failover(call: Callable[[], Awaitable[T]], what: str, patience_s: float = PATIENCE_S) -> T:
    """`await call()`, again while the bus fails over (at most `patience_s`)."""
    deadline = time.monotonic() + patience_s
    pause = 0.1
    while True:
        try:
            return await call()
        except TRANSIENT as exc:
            if time.monotonic() + pause > deadline:
                raise
            log.info("%s: %s; the bus may be failing over, trying again in %.1fs", what, type(exc).__name__, pause)
            await asyncio.sleep(pause)
            pause = min(2.0, pause * 2)
