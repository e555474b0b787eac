"""Global gradient-norm clipping: the one rule that decides a step's skip and clip factor.

No PNode holds every gradient, so each reports one squared norm per hosted VNode (unscaled: the
loss scale divided out). Here they are added up (correctly rounded, so the order they came in
cannot matter), and, as torch's `clip_grad_norm_` does, every gradient is scaled by
`max_norm / (norm + 1e-6)` when that is below 1. The numbers it comes from are the same bits on
any placement, so the factor is too. The orchestrator decides it for every PNode from their
replies (`decide`); with diloco's `inner_decisions: own` each replica's PNodes decide it themselves
from the norms they tell each other (`clip`), by this same rule.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable

from .pnode_api import PNodeReply

EPS = 1e-6  # clip_grad_norm_'s: keeps the factor finite for a zero norm


@dataclass(frozen=True)
class Clip:
    grad_norm: float | None  # the global norm before clipping; None when the step overflowed
    factor: float = 1.0  # what every gradient is multiplied by

    @property
    def clipped(self) -> bool:
        return self.factor < 1.0

    @property
    def skip(self) -> bool:
        """A gradient was not finite: the step's gradients are dropped."""
        return self.grad_norm is None


def clip(sq_norms: Iterable[float], max_norm: float) -> Clip:
    """The clip from every VNode's squared norm, each counted once; a non-finite one skips the step.
    `max_norm` 0 means never clip."""
    values = list(sq_norms)
    if not all(math.isfinite(v) for v in values):
        return Clip(None)
    norm = math.sqrt(math.fsum(values))
    if max_norm <= 0:
        return Clip(norm)
    return Clip(norm, min(1.0, max_norm / (norm + EPS)))


def decide(replies: Iterable[PNodeReply], max_norm: float) -> Clip:
    """The clip for one step from every PNode's `RunStep` reply."""
    sq_norms: dict[str, float] = {}
    for reply in replies:
        if reply.grad_sq_norms is None:
            return Clip(None)  # not finite somewhere: the step is skipped, nothing to clip
        sq_norms.update(reply.grad_sq_norms)  # a VNode is counted once, whoever reports it
    return clip(sq_norms.values(), max_norm)
