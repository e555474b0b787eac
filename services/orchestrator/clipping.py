"""Global gradient-norm clipping, decided once per step for every PNode of a session.

No PNode holds every gradient, so each reports one squared norm per hosted VNode (unscaled: the
loss scale divided out). Here they are added up (correctly rounded, so the order they came in
cannot matter), and, as torch's `clip_grad_norm_` does, every gradient is scaled by
`max_norm / (norm + 1e-6)` when that is below 1. Every PNode gets the same factor with
`ApplyStep`; the numbers it comes from are the same bits on any placement, so the factor is too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable

from computeall.protocol.pnode_api import PNodeReply

EPS = 1e-6  # clip_grad_norm_'s: keeps the factor finite for a zero norm


@dataclass(frozen=True)
class Clip:
    grad_norm: float | None  # the global norm before clipping; None when the step overflowed
    factor: float = 1.0  # what every gradient is multiplied by

    @property
    def clipped(self) -> bool:
        return self.factor < 1.0


def decide(replies: Iterable[PNodeReply], max_norm: float) -> Clip:
    """The clip for one step from every PNode's `RunStep` reply; `max_norm` 0 means never clip."""
    sq_norms: dict[str, float] = {}
    for reply in replies:
        if reply.grad_sq_norms is None:
            return Clip(None)  # not finite somewhere: the step is skipped, nothing to clip
        sq_norms.update(reply.grad_sq_norms)  # a VNode is counted once, whoever reports it
    norm = math.sqrt(math.fsum(sq_norms.values()))
    if max_norm <= 0:
        return Clip(norm)
    return Clip(norm, min(1.0, max_norm / (norm + EPS)))
