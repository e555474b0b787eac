"""What a projection handler sees and produces, and the registry of handlers by event type.

One handler per command or event type the monitor shows (services/monitor/handlers.py), keyed by
its pydantic model. A type without a handler is still stored whole in `events` (and so on the
session's timeline): showing a new event type takes no code here at all.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from pydantic import BaseModel, ConfigDict

from computeall.protocol.telemetry import MemorySample


class Header(BaseModel):
    """The envelope read leniently: enough to store any event, known type or not."""

    model_config = ConfigDict(extra="ignore")

    id: str
    type: str
    ts: float
    actor: str = "system"
    session_id: str | None = None
    payload: dict[str, Any]


@dataclass
class Message:
    stream: str
    seq: int
    subject: str
    data: bytes


@dataclass
class Batch:
    """Everything one transaction writes, plus what subscribers hear after it commits."""

    positions: dict[str, int] = field(default_factory=dict)
    malformed: list[tuple] = field(default_factory=list)
    events: list[tuple] = field(default_factory=list)
    # statements in log order for rare, stateful changes (session lifecycle, allocations, pnodes)
    ops: list[tuple[str, list]] = field(default_factory=list)
    steps: dict[tuple[str, int], tuple] = field(default_factory=dict)
    memory: list[tuple] = field(default_factory=list)
    requests: list[tuple] = field(default_factory=list)
    timings: list[tuple] = field(default_factory=list)
    latest_memory: dict[str, MemorySample] = field(default_factory=dict)
    notices: list[tuple[str, dict]] = field(default_factory=list)


# (batch, the envelope, its typed payload, the stream message) -> rows added to the batch
Handler = Callable[[Batch, Header, Any, Message], None]
HANDLERS: dict[str, Handler] = {}


def type_name(model: type[BaseModel]) -> str:
    return model.model_fields["type"].default


def projects(*models: type[BaseModel]) -> Callable[[Handler], Handler]:
    """Register the decorated function as the projection of each of `models` (one handler per type)."""

    def register(handler: Handler) -> Handler:
        for model in models:
            name = type_name(model)
            if name in HANDLERS:
                raise ValueError(f"{name} is projected twice: by {HANDLERS[name].__name__} and {handler.__name__}")
            HANDLERS[name] = handler
        return handler

    return register
