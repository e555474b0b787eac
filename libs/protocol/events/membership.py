"""PNodes joining, leaving and going silent (a loss is recorded per PNode and per session it served)."""

from __future__ import annotations

from typing import Literal

from ..throughput import Throughput
from .base import DomainEvent, recorded_as


@recorded_as("pnode")
class PNodeJoined(DomainEvent):
    type: Literal["PNodeJoined"] = "PNodeJoined"
    pnode: str
    host: str
    os_pid: int
    device: str
    memory_bytes: int  # what it may be given: its offer, at most its credential's cap
    throughput: Throughput | None = None  # what it measured of its compute and its link to the bus
    offered_bytes: int | None = None  # what it claimed, when that was more than its cap


@recorded_as("pnode")
class PNodeLeft(DomainEvent):
    type: Literal["PNodeLeft"] = "PNodeLeft"
    pnode: str


@recorded_as("pnode", "session")
class PNodeLost(DomainEvent):
    """A PNode the session used went silent for the heartbeat timeout (also recorded per PNode)."""

    type: Literal["PNodeLost"] = "PNodeLost"
    pnode: str
    step: int | None = None  # the step in flight, if any
    silent_s: float = 0.0
