"""What every recorded event shares, and the registry the event unions are built from.

An event class names the families it is recorded under (`@recorded_as("session")`); the
unions `SessionEvent`, `PNodeEvent`, `DatasetEvent` and `Event` in `events/__init__.py` are
made from the registry, so adding an event type is one class in one of these modules.
"""

from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import BaseModel, ConfigDict, Field

Family = Literal["session", "pnode", "dataset"]

_REGISTERED: dict[str, list[type[DomainEvent]]] = {"session": [], "pnode": [], "dataset": []}


class DomainEvent(BaseModel):
    model_config = ConfigDict(extra="forbid")


def recorded_as(*families: Family):
    """Register an event type under the subjects of these families (`ca.evt.<family>.…`)."""

    def register(cls: type[DomainEvent]) -> type[DomainEvent]:
        for family in families:
            _REGISTERED[family].append(cls)
        return cls

    return register


def union_of(*families: Family):
    """The discriminated union of the event types of these families, in registration order."""
    members: list[type[DomainEvent]] = []
    for family in families:
        members += [cls for cls in _REGISTERED[family] if cls not in members]
    return Annotated[Union[tuple(members)], Field(discriminator="type")]
