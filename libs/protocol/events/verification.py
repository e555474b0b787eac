"""Spot checks of a session: the seed of its check stream, each step's checks, a mismatch, a quarantine."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from ..verification import ItemDigests
from .base import DomainEvent, recorded_as
from .training import LossScaleChanged, StepCompleted, StepSkipped, ValidationCompleted


@recorded_as("session")
class VerificationSeeded(DomainEvent):
    """The seed of the session's check stream, drawn once; with the log's allocations it says which
    items were checked at every step (`computeall.orchestrator.verification.stream`)."""

    type: Literal["VerificationSeeded"] = "VerificationSeeded"
    seed: int


class CheckOutcome(BaseModel):
    micro: int
    vnode: str
    pnode: str  # whose results were checked
    checker: str
    backward: bool
    # abandoned: the material or the recomputation did not come (a PNode died or restarted meanwhile)
    outcome: Literal["passed", "failed", "abandoned"]


@recorded_as("session")
class ChecksCompleted(DomainEvent):
    """Every check of `step`, once all of them are settled (they overlap later steps)."""

    type: Literal["ChecksCompleted"] = "ChecksCompleted"
    step: int
    checks: list[CheckOutcome]


@recorded_as("session")
class VerificationFailed(DomainEvent):
    """A recomputation disagreed with what the host committed to; `quarantined` is the verdict.

    `material_ok` is false when the inputs the host handed the checker do not match what their
    producers committed to. A third PNode (`tiebreaker`) recomputes whenever a check fails."""

    type: Literal["VerificationFailed"] = "VerificationFailed"
    step: int
    micro: int
    vnode: str
    pnode: str
    checker: str
    backward: bool
    claimed: ItemDigests
    recomputed: ItemDigests
    material_ok: bool = True
    tiebreaker: str | None = None
    tiebreak: ItemDigests | None = None
    tiebreak_material_ok: bool | None = None
    quarantined: list[str] = Field(default_factory=list)


@recorded_as("pnode", "session")
class PNodeQuarantined(DomainEvent):
    """The PNode computed wrong results: it gets no more work (also recorded per PNode)."""

    type: Literal["PNodeQuarantined"] = "PNodeQuarantined"
    pnode: str
    step: int | None = None  # the step whose check caught it
    reason: str
    credential_revoked: bool = False  # its bus credential was revoked too


@recorded_as("session")
class ResultsDiscarded(DomainEvent):
    """Steps from `from_step` on may hold a quarantined PNode's results: their records are superseded
    by the re-run, and checkpoints after `from_step` no longer count."""

    type: Literal["ResultsDiscarded"] = "ResultsDiscarded"
    from_step: int
    pnodes: list[str]
    reason: str


def standing(payloads: list) -> list:
    """A session's event payloads without the records a later `ResultsDiscarded` superseded: those of
    the steps from `from_step` on (and validations after it), which the re-run records again."""
    out: list = []
    for p in payloads:
        if isinstance(p, ResultsDiscarded):
            out = [q for q in out if not _superseded(q, p.from_step)]
        out.append(p)
    return out


def _superseded(payload, from_step: int) -> bool:
    if isinstance(payload, (StepCompleted, StepSkipped, LossScaleChanged)):
        return payload.step >= from_step
    return isinstance(payload, ValidationCompleted) and payload.step > from_step
