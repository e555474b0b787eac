"""A connection to a running computeall: NATS, JetStream, the event log."""

from __future__ import annotations

from contextlib import asynccontextmanager
from typing import AsyncIterator

import nats
import nats.errors

from computeall.protocol.eventlog import EventLog, ensure_streams
from computeall.protocol.subjects import Subjects

from .errors import UserError


class Client:
    def __init__(self, nc, subjects: Subjects) -> None:
        self.nc = nc
        self.js = nc.jetstream()
        self.subjects = subjects
        self.eventlog = EventLog(self.js, subjects)


@asynccontextmanager
async def connect(url: str, prefix: str | None = None) -> AsyncIterator[Client]:
    try:
        nc = await nats.connect(url, connect_timeout=3, max_reconnect_attempts=2, allow_reconnect=False)
    except (nats.errors.NoServersError, OSError, TimeoutError) as exc:
        raise UserError(f"cannot reach NATS at {url} ({type(exc).__name__}); is `computeall up` running?") from None
    client = Client(nc, Subjects(prefix))
    await ensure_streams(client.js, client.subjects)
    try:
        yield client
    finally:
        await nc.close()
