"""Tensor frames into a PNode: who sent each (its subject), whether the plan of the session it is
for expects it from that sender (`admission.py`), then its chunks reassembled per sender.

The order is the point: a frame's header is parsed and checked before its tensor takes any memory,
and a sender's chunks only ever join its own tensors, each within the size its route carries, at
most `TENSORS_PENDING_PER_SENDER` unfinished at once. So a PNode the plan does not name costs a
receiver one header parse per frame, and one it names (a producer gone wrong) at most its own
budget: that many times its largest tensor. Used by the real PNode (on its wire thread) and the
simulated one alike; neither imports torch here.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from computeall.protocol.limits import TENSORS_PENDING_PER_SENDER
from computeall.protocol.subjects import Subjects, tensor_sender
from computeall.protocol.wire import Reassembler, Tensor, WireError, decode_frame

from .admission import LateFrame, Route

log = logging.getLogger("computeall.pnode.inbound")


@dataclass(frozen=True)
class Delivery:
    """A whole tensor that its stage's plan expects from its sender, digest verified."""

    stage: Any  # the stage of the session it is for (`stage.SessionStage`, `sim_stage.SimulatedStage`)
    route: Route
    sender: str
    tensor: Tensor


class Inbound:
    def __init__(self, subjects: Subjects, stage_of: Callable[[str], Any]) -> None:
        self.subjects = subjects
        self.stage_of = stage_of  # session id -> the hosted stage (with its `admission`), or None
        # a sender publishes a tensor's chunks one after the other on each of its streams (a pass's outbox,
        # the replica sums', check material): a few unfinished tensors at once, per session it shares
        self.reassembler = Reassembler(max_pending=TENSORS_PENDING_PER_SENDER)
        self.rejected = 0

    def take(self, subject: str, frame: bytes) -> Delivery | None:
        """One frame in: the tensor once this frame completes it. `WireError` says why a frame is refused."""
        try:
            sender = tensor_sender(self.subjects, subject)
        except ValueError as exc:
            raise WireError(str(exc)) from None
        header, body = decode_frame(frame, self.reassembler.max_tensor_bytes)
        session = header.meta.get("session")
        stage = self.stage_of(session) if isinstance(session, str) else None
        if stage is None:
            raise WireError(f"tensor {header.key!r} from {sender} is for session {session!r}, which this PNode does not host")
        route = stage.admission.admit(sender, header)
        whole = self.reassembler.add(header, body, sender)
        return None if whole is None else Delivery(stage, route, sender, whole)

    def refused(self, exc: WireError) -> None:
        """Count and log a refused frame; a late one (an aborted try's) only at debug level."""
        if isinstance(exc, LateFrame):
            log.debug("dropped a late tensor frame: %s", exc)
            return
        self.rejected += 1
        log.warning("rejected a tensor frame (%d so far): %s", self.rejected, exc)
