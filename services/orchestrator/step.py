"""One training step across every PNode: run it, decide apply or skip, record it once.

The loss scale is decided here for all PNodes together (`LossScaler`). The scaler is kept from
step to step and rebuilt from the log after any jump (start, resume, rollback), so a re-run
step decides exactly as it did the first time: same bits.
"""

from __future__ import annotations

import logging
import time

from computeall.protocol.events import LossScaleChanged, StepCompleted, StepSkipped, standing
from computeall.protocol.pnode_api import ApplyStep, RunStep

from .loss_scale import LossScaler, replay
from .recorder import SessionRecorder
from .session_pnodes import SessionPNodes
from .verification.checks import SessionChecks

log = logging.getLogger("computeall.orchestrator.step")


class TrainingStep:
    def __init__(self, recorder: SessionRecorder, pnodes: SessionPNodes, dynamic_scaling: bool,
                 checks: SessionChecks) -> None:
        self.recorder = recorder
        self.pnodes = pnodes
        self.dynamic_scaling = dynamic_scaling
        self.checks = checks
        self.scaler: LossScaler | None = None
        self.scaler_step = -1  # the step the scaler's state is for

    async def run(self, step: int) -> None:
        state = self.recorder.state
        config = state.config
        lr = config.lr.at(step, config.steps)
        t0 = time.monotonic()
        scaler = await self._scaler_before(step)
        scale = scaler.scale
        replies = await self.pnodes.all(lambda p: RunStep(session_id=state.id, step=step, loss_scale=scale))
        self.checks.pick(step, replies, scale)  # only now: every PNode has committed to its results
        overflowed = sorted(r.pnode for r in replies if not r.grads_finite)
        decision = scaler.update(bool(overflowed))  # one decision, every PNode applies or skips
        self.scaler_step = step + 1
        await self.pnodes.all(lambda p: ApplyStep(session_id=state.id, step=step, lr=lr, skip=not decision.apply,
                                                  **self.checks.apply_fields(p)))
        self.checks.launch(step)  # they run while the next steps train
        elapsed = time.monotonic() - t0
        tokens = sum(r.tokens for r in replies)
        loss = sum(r.loss_sum or 0.0 for r in replies) / max(1, tokens)
        if step < state.next_step:
            # re-run after a resume or a rollback: the log has this step already; a step is recorded once
            log.info("session %s: re-ran step %d, loss %.6f", state.id, step, loss)
            return
        compute = sum(r.compute_s for r in replies)
        if not decision.apply:
            await self.recorder.record(StepSkipped(step=step, reason=f"non-finite gradients on {', '.join(overflowed)}"))
        if decision.changed:
            await self.recorder.record(LossScaleChanged(step=step, old=decision.old, new=decision.new, reason=decision.reason))
        await self.recorder.record(
            StepCompleted(step=step, loss=loss, tokens=tokens, step_time_s=elapsed, lr=lr, loss_scale=decision.old,
                          compute_s=compute, wait_s=max(0.0, elapsed - compute),
                          wire_bytes=sum(sum(r.sent_bytes.values()) for r in replies))
        )

    async def _scaler_before(self, step: int) -> LossScaler:
        """The loss scaler as it stands before `step`."""
        if self.scaler is None or self.scaler_step != step:
            config = self.recorder.state.config.loss_scale
            events = standing(await self.recorder.events())  # without what a quarantine superseded
            self.scaler, self.scaler_step = replay(config, self.dynamic_scaling, events, before_step=step), step
        return self.scaler
