"""A connection to a running computeall: NATS, JetStream, the event log."""

from __future__ import annotations

from contextlib import asynccontextmanager
from typing import AsyncIterator

from computeall.protocol import bus
from computeall.protocol.credentials import Credential, CredentialError
from computeall.protocol.eventlog import EventLog
from computeall.protocol.subjects import Subjects

from .errors import UserError


class Client:
    def __init__(self, nc, subjects: Subjects, credential: Credential) -> None:
        self.nc = nc
        self.js = nc.jetstream()
        self.subjects = subjects
        self.credential = credential
        self.eventlog = EventLog(self.js, subjects)


@asynccontextmanager
async def connect(credential: Credential, prefix: str | None = None) -> AsyncIterator[Client]:
    """Connected as `credential`'s identity (see `computeall.cli.identity` for which one a command uses)."""
    try:
        nc = await bus.connect(credential, name=f"computeall-cli-{credential.name}", connect_timeout=3,
                               max_reconnect_attempts=2, allow_reconnect=False)
    except (bus.BusConnectError, CredentialError) as exc:
        raise UserError(f"{exc}; is `computeall up` running?") from None
    try:
        yield Client(nc, Subjects(prefix), credential)
    finally:
        await nc.close()
