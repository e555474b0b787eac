"""Getting a session onto live PNodes with a consistent state: at the start, and after a PNode is lost.

Recovery aborts the step in flight, places the network on the PNodes still alive and rolls every
PNode back to the last committed checkpoint (a consistent cut). Batches and math are
deterministic, so re-running from there ends exactly where a run without the failure would.
A request stalled on messages lost with a nats-server (`StepStalled`) comes here too, losing no PNode.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from computeall.protocol.events import PNodeLost, RolledBack, StepAborted

from .checkpoints import Checkpoints
from .errors import PNodeFailure
from .placement import Placement
from .pnodes import PNodeRegistry
from .recorder import SessionRecorder

log = logging.getLogger("computeall.orchestrator.recovery")


@dataclass(eq=False)
class Recovery:
    recorder: SessionRecorder
    registry: PNodeRegistry
    placement: Placement
    checkpoints: Checkpoints

    async def start(self) -> int:
        """Place the network and load the newest intact checkpoint; the step to go on from."""
        try:
            return await self._place(reason="start")
        except PNodeFailure as failure:
            return await self.recover(failure, 0)

    async def recover(self, failure: PNodeFailure, step: int) -> int:
        """Abort the step, place the network on the live PNodes, roll everyone back; the step to go on from."""
        state = self.recorder.state
        while True:
            for pnode in failure.pnodes:
                await self.recorder.record(PNodeLost(pnode=pnode, step=step, silent_s=min(self.registry.silent_s(pnode), 1e9)))
            await self.recorder.record(StepAborted(step=step, reason=str(failure)))
            log.warning("session %s: %s; recovering", state.id, failure)
            try:
                why = f"lost {', '.join(failure.pnodes)}" if failure.pnodes else str(failure)  # StepStalled loses none
                restored = await self._place(reason=why, exclude=set(failure.pnodes))
            except PNodeFailure as again:
                failure = again
                continue
            await self.recorder.record(RolledBack(to_step=restored, from_step=max(step, state.next_step)))
            return restored

    async def _place(self, reason: str, exclude: set[str] = frozenset()) -> int:
        await self.placement.place(reason, exclude)
        return await self.checkpoints.restore()
