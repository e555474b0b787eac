"""The PNodes that hold one session's plan, and requests to all of them at once.

Placement decides who they are (`adopt`); the step loop, checkpoints and validation only ask
them things. A request to all fails with `PNodeFailure` as soon as one goes silent or restarts
(its generation moved on since it took the plan), and a PNode still working after the
session's `slow_after_s` is recorded once as `PNodeSlow`. A request unanswered for long beyond
what its kind took lately fails with `Unanswered` (the PNodes at fault are lost) or, once the bus
lost messages or when a pass's inputs never came, with `StepStalled` (`stalls.py`).
"""

from __future__ import annotations

import logging
import time
from typing import Callable

from pydantic import BaseModel

from computeall.protocol.events import PNodeSlow
from computeall.protocol.pnode_api import (
    ApplyStep, LoadCheckpoint, PassRequest, PNodeReply, RunStep, SaveCheckpoint, Unload, WaitsForPeers,
)

from .errors import PNodeFailure, SessionError, StepStalled, Unanswered
from .pnode_calls import PNodeCalls
from .recorder import SessionRecorder
from .stalls import StallDeadlines

log = logging.getLogger("computeall.orchestrator.session_pnodes")

PASSES = tuple(kind.model_fields["type"].default for kind in PassRequest.__subclasses__())  # RunStep, RunValidation
CHECKPOINTS = tuple(kind.model_fields["type"].default for kind in (SaveCheckpoint, LoadCheckpoint))
# diloco: an ApplyStep that lands an outer step waits for the other replicas' sync, so it is timed
# apart from the others (one in `inner_steps`, it would never move their median)
OUTER_SYNC_LANDS = "ApplyStep landing an outer sync"
RUN_STEP, APPLY_STEP = (kind.model_fields["type"].default for kind in (RunStep, ApplyStep))


class SessionPNodes:
    def __init__(self, calls: PNodeCalls, recorder: SessionRecorder, deadlines: StallDeadlines | None = None) -> None:
        self.calls = calls
        self.recorder = recorder
        self.pnodes: list[str] = []
        self.first_replica: list[str] = []  # the PNodes of replica 0 (all of them without replicas)
        self.generations: dict[str, int] = {}  # the PNode incarnations that hold the plan
        self.deadlines = deadlines or StallDeadlines()  # the session's, kept by the orchestrator across its drivers
        self.outer_sync_s = 0.0  # what diloco's outer sync takes over the links, the allocation's estimate

    def adopt(self, pnodes: list[str], first_replica: list[str] | None = None, estimated_step_s: float = 0.0,
              checkpoint_s: float = 0.0, outer_sync_s: float = 0.0) -> None:
        """These PNodes hold the plan from now on, as the incarnations alive right now; until one is
        measured, a pass should take about `estimated_step_s` (the allocation's estimate), a checkpoint
        saved or loaded about `checkpoint_s` (its largest share over its PNode's link), and diloco's
        outer sync `outer_sync_s` (the same for what a PNode sends in it)."""
        for kind in PASSES:
            self.deadlines.estimate(kind, estimated_step_s)
        for kind in CHECKPOINTS:
            self.deadlines.estimate(kind, checkpoint_s)
        self.outer_sync_s = outer_sync_s
        self.deadlines.estimate(OUTER_SYNC_LANDS, outer_sync_s)
        self.pnodes = list(pnodes)
        self.first_replica = list(pnodes if first_replica is None else first_replica)
        self.generations = {p: self.calls.registry.generation(p) for p in self.pnodes}

    async def all(self, make: Callable[[str], BaseModel], timeout: float | None = None,
                  report_slow: bool = True, first_replica: bool = False, kind: str | None = None,
                  behind: str | None = None) -> list[PNodeReply]:
        """One request per PNode (`make(pnode)`), the replies in the PNodes' order; `first_replica`:
        only to the PNodes of replica 0 (a whole pipeline: what every replica holds alike). `kind`: the
        deadlines' kind, when not the request's type; `behind`: the kind of a request sent just before,
        which each PNode answers first (its time is allowed too)."""
        state = self.recorder.state
        requests = {p: make(p) for p in (self.first_replica if first_replica else self.pnodes)}
        kind = kind or (next(iter(requests.values())).type if requests else "")
        own = self.deadlines.allowance(kind)
        allowance = own.after(self.deadlines.allowance(behind)) if behind else own
        # a request that waits for other PNodes: each says so before the deadline if what it waits for never comes
        requests = {p: r.model_copy(update={"give_up_s": own.give_up_s}) if isinstance(r, WaitsForPeers) else r
                    for p, r in requests.items()}
        t0 = time.monotonic()
        try:
            replies = await self.calls.all(list(requests), requests.__getitem__, timeout,
                                           state.config.slow_after_s if report_slow else None, self._slow,
                                           self.generations, allowance)
        except (StepStalled, Unanswered):
            self.deadlines.stalled(kind)
            raise
        took = time.monotonic() - t0
        self.deadlines.took(kind, took)
        if kind == RUN_STEP:
            # an update costs less than the pass that made its gradients (6 x tokens FLOPs per parameter against
            # a few elementwise passes): until one is timed, an ApplyStep is allowed a few times that pass (a 1B
            # network's first update on shared cores outlasts the stated bound)
            self.deadlines.estimate(APPLY_STEP, took)
            self.deadlines.estimate(OUTER_SYNC_LANDS, self.outer_sync_s + took)
        return replies

    async def unload(self, pnodes: list[str]) -> None:
        """Best effort: a PNode that is gone or fails to answer holds nothing of ours anyway."""
        for pnode in pnodes:
            try:
                await self.calls.one(pnode, Unload(session_id=self.recorder.state.id), timeout=10.0)
            except (SessionError, PNodeFailure):
                pass

    async def _slow(self, pnode: str, waited_s: float) -> None:
        state = self.recorder.state
        log.warning("session %s: pnode %s still working after %.0fs", state.id, pnode, waited_s)
        await self.recorder.record(PNodeSlow(pnode=pnode, step=state.next_step, waited_s=waited_s))
