"""What follows a verdict: the PNodes are quarantined, and the session goes back past their work.

Their results may have reached every parameter downstream of them, in any step since they first
worked for the session, checked or not: so the session rolls back to the newest checkpoint that
none of their results can have reached (`SessionState.clean_checkpoint`: committed while none of
them had worked since the state's origin; the initial state when there is none), and every step
from there is run and recorded again, without them. They get no more work from this orchestrator
in any session, and their credential is revoked.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

import nats.errors
from nats.aio.client import Client as NATS

from computeall.protocol.events import EventEnvelope, PNodeQuarantined, ResultsDiscarded, RolledBack
from computeall.protocol.membership_api import MembershipError, revoke_pnode
from computeall.protocol.subjects import Subjects

from ..checkpoints import Checkpoints
from ..errors import Quarantine
from ..placement import Placement
from ..pnodes import PNodeRegistry
from ..recorder import SessionRecorder
from .checks import SessionChecks

log = logging.getLogger("computeall.orchestrator.verification")


async def revoke_credential(nc: NATS, subjects: Subjects, pnode: str, reason: str) -> bool:
    """Revoke the PNode's bus credential (secure membership's authority closes its connections), so it
    cannot even connect any more; False when no authority answers (a deployment without `computeall
    up`, such as docker compose) or it refuses. The quarantine stands either way."""
    try:
        reply = await revoke_pnode(nc, subjects, pnode, reason=reason[:500])
    except (MembershipError, nats.errors.Error, asyncio.TimeoutError) as exc:
        log.warning("pnode %s is quarantined, but its credential could not be revoked: %s", pnode, exc)
        return False
    return bool(reply.revoked)


@dataclass(eq=False)
class QuarantineRecovery:
    recorder: SessionRecorder
    registry: PNodeRegistry
    placement: Placement
    checkpoints: Checkpoints
    checks: SessionChecks

    async def recover(self, verdict: Quarantine, step: int) -> int:
        """Quarantine, discard what their results may have reached, place without them, roll back;
        the step to go on from."""
        state = self.recorder.state
        self.checks.cancel()
        bad = set(verdict.pnodes) | set(state.quarantined)
        clean = state.clean_checkpoint(bad)
        for pnode in verdict.pnodes:
            self.registry.quarantine(pnode)
            calls = self.placement.session_pnodes.calls
            revoked = await revoke_credential(calls.nc, calls.subjects, pnode, f"spot checks: {verdict}")
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
