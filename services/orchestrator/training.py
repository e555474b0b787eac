"""The step loop of one session, top to bottom: boundary, step, checkpoint, validate, rebalance.

Between steps the loop folds what others recorded (pause, stop and validation requests), so it
holds no state the log does not have. A `PNodeFailure` anywhere in an iteration sends the loop
through recovery, which says which step to go on from.
"""

from __future__ import annotations

import asyncio
import logging

from computeall.protocol.events import RolledBack, SessionCompleted

from .checkpoints import Checkpoints
from .errors import DriverDone, LostClaim, PNodeFailure, Quarantine
from .placement import NoRoom, Placement
from .recorder import SessionRecorder
from .recovery import Recovery
from .samples import Sampler
from .session_pnodes import SessionPNodes
from .step import TrainingStep
from .validation import validate
from .verification.checks import SessionChecks
from .verification.quarantine import QuarantineRecovery

log = logging.getLogger("computeall.orchestrator.training")


class Trainer:
    def __init__(self, recorder: SessionRecorder, pnodes: SessionPNodes, placement: Placement,
                 checkpoints: Checkpoints, recovery: Recovery, training_step: TrainingStep, sampler: Sampler,
                 checks: SessionChecks, quarantine: QuarantineRecovery, shutdown: asyncio.Event) -> None:
        self.recorder = recorder
        self.pnodes = pnodes
        self.placement = placement
        self.checkpoints = checkpoints
        self.recovery = recovery
        self.training_step = training_step
        self.sampler = sampler
        self.checks = checks
        self.quarantine = quarantine
        self.shutdown = shutdown  # set when this orchestrator stops: checkpoint at the next boundary, then end

    async def train(self) -> None:
        try:
            await self._train()
        finally:
            self.training_step.drop_ahead()

    async def _train(self) -> None:
        config = self.recorder.state.config
        end = config.replay_of.to_step if config.replay_of else config.steps
        step = await self.recovery.start()
        await self.checks.start()
        while True:
            try:
                if await self._boundary(step):
                    return
                if step >= end:
                    await self.checks.settle(step, wait_all=True)  # nothing ends unchecked
                    await self.checkpoints.save(step)  # the final state, kept like any other checkpoint
                    break
                await self.training_step.run(step, then_next=self._straight_on(step + 1, end))
                step += 1
                await self.checks.settle(step)
                at_checkpoint = self._at_checkpoint(step, end)
                if at_checkpoint:
                    await self.checkpoints.save(step)
                if self._validates(step):
                    await validate(self.recorder, self.pnodes, step)
                if self.sampler.due(step, end):
                    await self.sampler.request(step)  # written beside the next steps, recorded at a boundary
                step = await self._rebalance(step, at_checkpoint)
            except Quarantine as verdict:
                self.training_step.drop_ahead()
                self.sampler.abandon()  # samples of states about to be discarded
                step = await self.quarantine.recover(verdict, step)
            except PNodeFailure as failure:
                self.training_step.drop_ahead()
                self.checks.cancel()
                step = await self.recovery.recover(failure, step)
        await self.sampler.drain()
        state = self.recorder.state
        await self.recorder.record(SessionCompleted(steps=step, final_loss=state.last_loss))
        log.info("session %s completed at loss %.4f", state.id, state.last_loss or float("nan"))

    def _at_checkpoint(self, step: int, end: int) -> bool:
        every = self.recorder.state.config.checkpoint_every
        return bool(every) and step % every == 0 and step < end

    def _validates(self, step: int) -> bool:
        every = self.recorder.state.config.validate_every
        return bool(every) and step % every == 0

    def _straight_on(self, step: int, end: int) -> bool:
        """Whether the loop, at `step`, goes straight on to run it, as far as it knows now: the last step's
        ApplyStep then takes this step's RunStep along (`TrainingStep.run`)."""
        return step < end and not (self._at_checkpoint(step, end) or self._validates(step) or self.sampler.due(step, end))

    async def _boundary(self, step: int) -> bool:
        """Fold what others recorded and act on it; True when the loop is done."""
        state = await self.recorder.refresh()
        if state.claimed_by != self.recorder.orchestrator_id:
            raise LostClaim(f"session {state.id} is driven by {state.claimed_by}")
        await self.sampler.record_ready()
        self.sampler.ask_again()
        if self.shutdown.is_set() or state.at_boundary(step) or state.validation_requested:
            self.training_step.drop_ahead()  # what comes next asks the PNodes for something else first
        if self.shutdown.is_set():  # the orchestrator stops (Ctrl-C on `computeall up`): keep every step done
            await self.checks.settle(step, wait_all=True)
            await self.checkpoints.save(step)
            raise DriverDone(f"checkpointed at step {step} as the orchestrator stops; it goes on from there when one runs again")
        ending = state.at_boundary(step)  # a pending stop or pause
        if ending:
            await self.checks.settle(step, wait_all=True)
            await self.checkpoints.save(step)
            await self.sampler.drain()
            for event in ending:
                await self.recorder.record(event)
            return True
        if state.validation_requested:
            await validate(self.recorder, self.pnodes, step)
        return False

    async def _rebalance(self, step: int, at_checkpoint: bool) -> int:
        """Act on placement's decision; the step to go on from. The state moves through a checkpoint
        of this very step, so nothing is rolled back, unless that checkpoint is found damaged: then the
        steps since the newest intact one are run again."""
        decision = await self.placement.rebalance(at_checkpoint)
        if decision is None:
            return step
        self.training_step.drop_ahead()
        await self.checks.settle(step, wait_all=True)  # moving VNodes drops the material checks need
        await self.checkpoints.save(step)
        if isinstance(decision, NoRoom):
            await self.placement.pause_for_capacity(decision.reason)
        await self.placement.adopt(decision.allocation, decision.reason)
        restored = await self.checkpoints.restore()
        if restored != step:
            log.warning("session %s: the checkpoint of step %d is damaged; going on from step %d",
                        self.recorder.state.id, step, restored)
            await self.recorder.record(RolledBack(to_step=restored, from_step=max(step, self.recorder.state.next_step)))
        await self.pnodes.unload(decision.released)  # a leaving PNode exits once it hosts nothing
        return restored
