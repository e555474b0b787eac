"""What went wrong during a session and how it was repaired: slow PNodes, aborted steps, reallocation, rollback."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from .base import DomainEvent, recorded_as
from .training import Allocated


@recorded_as("session")
class PNodeSlow(DomainEvent):
    type: Literal["PNodeSlow"] = "PNodeSlow"
    pnode: str
    step: int
    waited_s: float


@recorded_as("session")
class StepAborted(DomainEvent):
    type: Literal["StepAborted"] = "StepAborted"
    step: int
    reason: str


@recorded_as("session")
class Reallocated(Allocated):
    """A new allocation after a PNode was lost, joined or left; the same fields as `Allocated`."""

    type: Literal["Reallocated"] = "Reallocated"  # type: ignore[assignment]
    reason: str
    moves: dict[str, str] = Field(default_factory=dict)  # vnode -> new pnode, for the VNodes that moved


@recorded_as("session")
class RolledBack(DomainEvent):
    """Every PNode went back to the checkpoint at `to_step`; steps from there are re-run."""

    type: Literal["RolledBack"] = "RolledBack"
    to_step: int
    from_step: int  # the first step not yet recorded when the failure happened
