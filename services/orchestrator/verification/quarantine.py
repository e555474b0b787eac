"""What follows a verdict: the PNodes are quarantined, and the session goes back past their work.

Their results may have reached every parameter downstream of them, in any step since they first
worked for the session, checked or not: so the session rolls back to the newest checkpoint that
none of their results can have reached (`SessionState.clean_checkpoint`: committed while none of
them had worked since the state's origin; the initial state when there is none), and every step
from there is run and recorded again, without them. They get no more work from this orchestrator
in any session, and their credential is revoked.
"""

from __future__ import annotations

import logging

from computeall.protocol.events import EventEnvelope, PNodeQuarantined, ResultsDiscarded, RolledBack

from ..checkpoints import Checkpoints
from ..errors import Quarantine
from ..placement import Placement
from ..pnodes import PNodeRegistry
from ..recorder import SessionRecorder
from .checks import SessionChecks

log = logging.getLogger("computeall.orchestrator.verification")


async def revoke_credential(pnode: str) -> bool:
    """SEAM for secure membership (issue #13): revoke the PNode's bus credential, so it cannot even
    connect any more. Until that lands a quarantined PNode is only never given work again."""
    log.warning("pnode %s is quarantined; revoking its credential is not available in this build", pnode)
    return False


class QuarantineRecovery:
    def __init__(self, recorder: SessionRecorder, registry: PNodeRegistry, placement: Placement,
                 checkpoints: Checkpoints, checks: SessionChecks) -> None:
        self.recorder = recorder
        self.registry = registry
        self.placement = placement
        self.checkpoints = checkpoints
        self.checks = checks

    async def recover(self, verdict: Quarantine, step: int) -> int:
        """Quarantine, discard what their results may have reached, place without them, roll back;
        the step to go on from."""
        state = self.recorder.state
        self.checks.cancel()
        bad = set(verdict.pnodes) | set(state.quarantined)
        clean = state.clean_checkpoint(bad)
        for pnode in verdict.pnodes:
            self.registry.quarantine(pnode)
            revoked = await revoke_credential(pnode)
            event = PNodeQuarantined(pnode=pnode, step=verdict.step, reason=str(verdict), credential_revoked=revoked)
            await self.recorder.record(event)
            await self._record_for_pnode(event)
        discarded = [c for c in state.checkpoints if c.step > clean]
        await self.recorder.record(ResultsDiscarded(
            from_step=clean, pnodes=verdict.pnodes,
            reason=f"{', '.join(verdict.pnodes)} may have computed wrong results since before step {clean + 1}",
        ))
        await self.checkpoints.delete_objects(discarded)
        log.warning("session %s: quarantined %s; going back to step %d", state.id, ", ".join(verdict.pnodes), clean)
        held = set(self.placement.pnodes) & set(verdict.pnodes)
        await self.placement.place(f"quarantined {', '.join(verdict.pnodes)}", exclude=bad)
        await self.placement.session_pnodes.unload(sorted(held))  # their copy of the session is of no use
        restored = await self.checkpoints.restore(clean_of=bad)
        await self.recorder.record(RolledBack(to_step=restored, from_step=step))
        return restored

    async def _record_for_pnode(self, event: PNodeQuarantined) -> None:
        """Also on the PNode's own subject, so every orchestrator (and a restarted one) leaves it out."""
        eventlog = self.recorder.session.eventlog
        envelope = EventEnvelope(id=f"quarantined-{event.pnode}", actor=f"orchestrator:{self.recorder.orchestrator_id}",
                                 payload=event)
        try:
            await eventlog.append_event(eventlog.subjects.pnode_evt(event.pnode, "PNodeQuarantined"), envelope)
        except Exception as exc:  # the session's record stands; this one only spreads the word
            log.warning("could not record PNodeQuarantined for %s on its own subject: %s", event.pnode, exc)
