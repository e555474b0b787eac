"""What a GraphQL resolver can reach: the monitor's services and the authenticated user."""

from __future__ import annotations

from dataclasses import dataclass

from computeall.protocol.eventlog import EventLog

from .auth import Auth
from .db import Database
from .pubsub import PubSub


@dataclass
class Services:
    db: Database
    auth: Auth
    eventlog: EventLog
    pubsub: PubSub
    heartbeat_timeout_s: float


@dataclass
class Context:
    user: str
    services: Services
