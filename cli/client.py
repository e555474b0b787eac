"""A connection to a running computeall as one identity: commands, and reads of its sessions.

A client does not read the event log itself: the log holds every user's sessions, so reads go
through the orchestrator, which answers only for the user's own (`computeall.protocol.session_reads`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import nats.errors
from pydantic import ValidationError

from computeall.protocol import bus
from computeall.protocol import session_reads as reads
from computeall.protocol.commands import CommandEnvelope
from computeall.protocol.credentials import Credential, CredentialError
from computeall.protocol.eventlog import EventLog
from computeall.protocol.events import EventEnvelope
from computeall.protocol.subjects import Subjects

from .errors import UserError

Recorded = tuple[int, EventEnvelope]


class Client:
    def __init__(self, nc, subjects: Subjects, credential: Credential) -> None:
        self.nc = nc
        self.js = nc.jetstream()
        self.subjects = subjects
        self.credential = credential

    @property
    def user(self) -> str:
        """Who the commands are from: the credential's name, which the server checks."""
        return self.credential.name

    async def publish_command(self, command: CommandEnvelope) -> int:
        return await EventLog(self.js, self.subjects).publish_command(command)

    async def session_ids(self) -> list[str]:
        return await self._read(reads.list_sessions(self.nc, self.subjects, self.user))

    async def session_events(self, sid: str) -> list[Recorded]:
        """The session's events so far, in log order (types this client does not know are left out)."""
        events = await self._read(reads.all_events(self.nc, self.subjects, self.user, sid))
        return [parsed for e in events if (parsed := _parse(e))]

    async def follow(self, sid: str) -> AsyncIterator[Recorded]:
        """The session's events from the first, then each new one as it is recorded."""
        stream = reads.follow_events(self.nc, self.subjects, self.user, sid)
        try:
            while (event := await self._read(anext(stream, None))) is not None:
                if parsed := _parse(event):
                    yield parsed
        finally:
            await stream.aclose()

    async def read_object(self, request: reads.ReadObject) -> bytes:
        return await self._read(reads.read_object(self.nc, self.subjects, self.user, request))

    async def _read(self, pending):
        try:
            return await pending
        except reads.ReadError as exc:
            raise UserError(str(exc)) from None
        except nats.errors.NoRespondersError:
            raise UserError("no orchestrator is running to answer: start the system with `computeall up`") from None
        except nats.errors.TimeoutError:
            raise UserError("the orchestrator did not answer in time; is it overloaded? (`computeall status`)") from None


def _parse(event: reads.RecordedEvent) -> Recorded | None:
    try:
        return event.seq, EventEnvelope.model_validate_json(event.data)
    except ValidationError:
        return None  # an event type this client does not know yet


@asynccontextmanager
async def connect(credential: Credential, prefix: str | None = None, *, reconnect: bool = False) -> AsyncIterator[Client]:
    """Connected as `credential`'s identity (see `computeall.cli.identity` for which one a command uses).

    A command fails at once when the bus is gone; `up` (`reconnect`) outlives a server that reloads
    its configuration as machines join, a first try included."""
    try:
        nc = await bus.connect(credential, name=f"computeall-cli-{credential.name}", connect_timeout=3,
                               max_reconnect_attempts=-1 if reconnect else 2, allow_reconnect=reconnect)
    except bus.BusConnectError as exc:  # refused: the server runs and said no; else it may not run at all
        raise UserError(str(exc) if exc.refused else f"{exc}; is `computeall up` running?") from None
    except CredentialError as exc:
        raise UserError(str(exc)) from None
    try:
        yield Client(nc, Subjects(prefix), credential)
    finally:
        await nc.close()
