"""Drives one session from its log: claim, prepare, place, then the step loop until it ends.

The driver only assembles the parts and decides how the session ends: each part does one job
(`claim`, `preparation`, `placement`, `checkpoints`, `recovery`, `step`, `validation`, and the
loop in `training`) and changes the session only through the `SessionRecorder`.
"""

from __future__ import annotations

import asyncio
import logging

from computeall.protocol.bus_failover import BusUnavailable
from computeall.protocol.events import SessionFailed
from computeall.protocol.session_log import SessionLog
from computeall.protocol.subjects import Subjects

from .checkpoints import Checkpoints
from .claim import claim
from .errors import DriverDone, LostClaim, SessionError
from .initial_weights import InitialWeights
from .loss_scale import uses_dynamic_scaling
from .network_jobs import NetworkJobs
from .placement import Placement
from .pnode_calls import PNodeCalls
from .pnodes import PNodeRegistry
from .preparation import prepare, wait_for_pnodes
from .recorder import SessionRecorder
from .recovery import Recovery
from .samples import Sampler
from .session_pnodes import SessionPNodes
from .session_storage import Grants, SessionStorage
from .stalls import StallDeadlines
from .step import TrainingStep
from .training import Trainer
from .verification.checks import SessionChecks
from .verification.quarantine import QuarantineRecovery

__all__ = ["SessionDriver"]

log = logging.getLogger("computeall.orchestrator.driver")


class SessionDriver:
    def __init__(
        self,
        calls: PNodeCalls,
        subjects: Subjects,
        session: SessionLog,
        registry: PNodeRegistry,
        orchestrator_id: str,
        jobs: NetworkJobs,
        takeover_from: str | None = None,
        pnode_wait_s: float = 120.0,
        grants: Grants = "authority",
        deadlines: StallDeadlines | None = None,
    ) -> None:
        self.calls = calls
        self.subjects = subjects
        self.registry = registry
        self.jobs = jobs
        self.pnode_wait_s = pnode_wait_s
        self.recorder = SessionRecorder(session, orchestrator_id, takeover_from)
        self.pnodes = SessionPNodes(calls, self.recorder, deadlines)
        self.shutdown = asyncio.Event()  # `shut_down`: the orchestrator stops
        self.storage = SessionStorage(calls.nc, subjects, session.state.id, grants)

    @property
    def state(self):
        return self.recorder.state

    def shut_down(self) -> None:
        """The orchestrator stops: checkpoint at the next step boundary and end, the session still running
        in the log, so the next orchestrator goes on from that checkpoint."""
        self.shutdown.set()

    async def run(self) -> None:
        successor = False  # another orchestrator drives the session now: its grants are its own
        try:
            await self._drive()
        except LostClaim as exc:
            successor = True
            log.info("session %s: %s", self.state.id, exc)
        except DriverDone as exc:
            log.info("session %s: %s", self.state.id, exc)
        except BusUnavailable as exc:  # the bus, not the session: it is driven again once the log answers
            log.warning("session %s: %s; it will be taken up again from its log", self.state.id, exc)
        except SessionError as exc:
            log.error("session %s failed: %s", self.state.id, exc)
            await self.recorder.record(SessionFailed(reason=str(exc)))
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug must still end the session visibly, never leave it hanging
            log.exception("session %s: internal error", self.state.id)
            await self.recorder.record(SessionFailed(reason=f"internal error: {type(exc).__name__}: {exc}"))
        finally:
            await self.pnodes.unload(self.pnodes.pnodes)
            if not successor:
                await self.storage.release(self.state.last_seq)

    async def _drive(self) -> None:
        if not await claim(self.recorder):
            return
        prepared = await prepare(self.state, self.calls.nc, self.subjects, self.jobs)
        placement = Placement(self.recorder, self.registry, self.pnodes, self.jobs, prepared.graph, prepared.dataset,
                              self.storage)
        initial = InitialWeights(self.recorder, self.pnodes, prepared, self.storage) if self.state.config.init_from else None
        checkpoints = Checkpoints(self.recorder, self.pnodes, placement, self.storage, initial)
        recovery = Recovery(self.recorder, self.registry, placement, checkpoints)
        checks = SessionChecks(self.recorder, self.pnodes, placement, self.registry, prepared.graph)
        quarantine = QuarantineRecovery(self.recorder, self.registry, placement, checkpoints, checks)
        precisions = [v.precision for v in prepared.graph.spec.vnodes]
        training_step = TrainingStep(self.recorder, self.pnodes, uses_dynamic_scaling(self.state.config.loss_scale, precisions),
                                     checks)
        sampler = Sampler(self.recorder, placement, checkpoints)
        await sampler.start()
        await wait_for_pnodes(self.state, self.registry, self.pnode_wait_s)
        try:
            await Trainer(self.recorder, self.pnodes, placement, checkpoints, recovery, training_step, sampler,
                          checks, quarantine, self.shutdown).train()
        finally:
            sampler.abandon()
            await placement.batch_access.end()
