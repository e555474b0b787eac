"""One training step across every PNode: run it, decide apply or skip and the clip, record it once.

The loss scale (`LossScaler`) and the global gradient clip (`clipping`) are decided here for all
PNodes together. The scaler is kept from
step to step and rebuilt from the log after any jump (start, resume, rollback), so a re-run
step decides exactly as it did the first time: same bits.

A RunStep that stalls because its messages were lost with a nats-server, or because inputs never
came to the PNodes that all answered (`StepStalled`), is recorded as `StepAborted` and sent again:
nothing of the step was decided, applied or recorded yet, and each PNode drops what it holds of the
try it replaces (`SessionStage.run_step`), so the step runs again from the same state. A PNode that
does not answer at all (`Unanswered`), and a stall later in the step (its ApplyStep: some PNodes may
have applied it), recover as from a lost PNode, through the last checkpoint.

When the loop goes straight on to the next step (`run(..., then_next=True)`), that step's RunStep is
sent right behind this step's ApplyStep (`RunAhead`): each PNode runs it once it applied, so a step
costs one control round trip instead of two, which a slow link to the PNodes makes most of a step's
overhead. The bits are the same: each PNode does the same work in the same order. Whatever else the
loop does first (a checkpoint, a validation, a recovery) drops it (`drop_ahead`).

With diloco's `inner_decisions: own` each replica's PNodes decide its skip and clip themselves, so
nothing a step applies waits for the orchestrator: the ApplyStep goes right behind its RunStep, the
next RunStep right behind that, and the step is recorded from the replies as they come
(`_updated_by_replicas`). A PNode never waits for a message from here between two steps. A fixed
loss scale is required (a dynamic one is decided here from every PNode's overflow); spot checks,
which pick what to keep before each update, do not cover replicas (`SessionConfig` refuses them).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

from computeall.protocol.events import (
    LossScaleChanged, StepAborted, StepCompleted, StepSkipped, UpdateRatios, standing,
)
from computeall.protocol.pnode_api import ApplyStep, PNodeReply, RunStep

from computeall.protocol import clipping
from .diagnostics import update_ratios
from .errors import SessionError, StepStalled
from .loss_scale import LossScaler, replay
from .recorder import SessionRecorder
from .session_pnodes import APPLY_STEP, OUTER_SYNC_LANDS, RUN_STEP, SessionPNodes
from .verification.checks import SessionChecks

log = logging.getLogger("computeall.orchestrator.step")


@dataclass
class RunAhead:
    """The RunStep of `step` at `scale`, sent before the step before it was recorded."""

    step: int
    scale: float
    replies: asyncio.Future  # of list[PNodeReply]

    def drop(self) -> None:
        _dropped(self.replies)


def _dropped(replies: asyncio.Future) -> None:
    """Replies no longer waited for: what they end with is nobody's business now (a PNode's pass they
    superseded, a loss recovery handles)."""
    replies.cancel()
    replies.add_done_callback(lambda f: f.cancelled() or f.exception())


class TrainingStep:
    def __init__(self, recorder: SessionRecorder, pnodes: SessionPNodes, dynamic_scaling: bool,
                 checks: SessionChecks) -> None:
        self.recorder = recorder
        self.pnodes = pnodes
        self.dynamic_scaling = dynamic_scaling
        self.checks = checks
        self.scaler: LossScaler | None = None
        self.scaler_step = -1  # the step the scaler's state is for
        self.ahead: RunAhead | None = None
        self.replicas_decide = recorder.state.config.sync.replicas_decide
        if self.replicas_decide and dynamic_scaling:
            raise SessionError("sync.inner_decisions: own needs a fixed loss scale (each replica would move its own), "
                               "and this session's scale is dynamic (an fp16 VNode, or loss_scale.mode: dynamic): "
                               "set loss_scale.mode: off, compute in bf16, or use inner_decisions: shared")

    def drop_ahead(self) -> None:
        """The loop does something else before the next step: the RunStep sent ahead is not waited for
        (the PNodes' pass gives way to whatever is asked of them next)."""
        if self.ahead is not None:
            self.ahead.drop()
            self.ahead = None

    async def run(self, step: int, then_next: bool = False) -> None:
        """`then_next`: the loop runs `step + 1` right after this one, nothing in between it knows of."""
        state = self.recorder.state
        config = state.config
        t0 = time.monotonic()
        scaler = await self._scaler_before(step)
        scale = scaler.scale
        update = ApplyStep(session_id=state.id, step=step, lr=config.lr.at(step, config.steps),
                           measure_update=bool(config.update_ratio_every) and step % config.update_ratio_every == 0,
                           replica_max_norm=config.grad_clip if self.replicas_decide else None)
        apply_kind = OUTER_SYNC_LANDS if config.sync.lands_after(step) else APPLY_STEP
        if self.replicas_decide:
            replies, applying = await self._updated_by_replicas(step, scale, update, apply_kind, then_next)
        else:
            replies, applying = await self._replies(step, scale), None
        self.checks.pick(step, replies, scale)  # only now: every PNode has committed to its results
        overflowed = sorted(r.pnode for r in replies if not r.grads_finite)
        decision = scaler.update(bool(overflowed))  # one decision, every PNode applies or skips
        self.scaler_step = step + 1
        # replica 0's PNodes hold the whole pipeline: summed gradients are alike on every replica; with
        # diloco each replica's differ, and replica 0's norm decides every replica's factor (deterministic
        # for fixed R), or each replica's its own (`inner_decisions: own`, decided on its PNodes): the step
        # records replica 0's
        first = set(self.pnodes.first_replica)
        clip = clipping.decide([r for r in replies if r.pnode in first], config.grad_clip)
        measured = update.measure_update and (not clip.skip if self.replicas_decide else decision.apply)
        if applying is None:
            decided = update.model_copy(update={"skip": not decision.apply, "clip_factor": clip.factor,
                                                "measure_update": measured})
            applying = asyncio.ensure_future(self.pnodes.all(
                lambda p: decided.model_copy(update=self.checks.apply_fields(p)), kind=apply_kind))
            if then_next:
                self._run_ahead(step + 1, scaler.scale, apply_kind)
        try:
            applied = await applying
        except BaseException:
            self.drop_ahead()
            raise
        self.checks.launch(step)  # they run while the next steps train
        elapsed = time.monotonic() - t0
        tokens = sum(r.tokens for r in replies)
        loss = micro_batch_sum(replies) / max(1, tokens)
        if step < state.next_step:
            # re-run after a resume or a rollback: the log has this step already; a step is recorded once
            log.info("session %s: re-ran step %d, loss %.6f", state.id, step, loss)
            return
        compute = sum(r.compute_s for r in replies)
        if not decision.apply:
            others = " (their replicas dropped the step, the others applied theirs)" if self.replicas_decide else ""
            await self.recorder.record(StepSkipped(step=step, reason=f"non-finite gradients on {', '.join(overflowed)}{others}"))
        if decision.changed:
            await self.recorder.record(LossScaleChanged(step=step, old=decision.old, new=decision.new, reason=decision.reason))
        await self.recorder.record(
            StepCompleted(step=step, loss=loss, tokens=tokens, step_time_s=elapsed, lr=update.lr, loss_scale=decision.old,
                          compute_s=compute, wait_s=max(0.0, elapsed - compute),
                          wire_bytes=sum(sum(r.sent_bytes.values()) for r in replies), grad_norm=clip.grad_norm,
                          clipped=clip.clipped, compute_s_by_pnode={r.pnode: r.compute_s for r in replies},
                          reduce_bytes=sum(r.reduce_bytes for r in replies + applied))
        )
        if measured:
            await self.recorder.record(UpdateRatios(step=step, ratios=update_ratios(a for a in applied if a.pnode in first)))

    async def _updated_by_replicas(self, step: int, scale: float, update: ApplyStep, apply_kind: str,
                                   then_next: bool) -> tuple[list[PNodeReply], asyncio.Future]:
        """`inner_decisions: own`: the RunStep's replies, and the update sent right behind it (and the next
        step's RunStep behind that, when it comes next): the PNodes go from pass to update to pass without
        a word from here. A stall sends all of it again."""
        while True:
            ahead = self._take_ahead(step, scale)
            running = ahead.replies if ahead is not None else asyncio.ensure_future(self._run_once(step, scale))
            applying = asyncio.ensure_future(self.pnodes.all(lambda p: update, kind=apply_kind, behind=RUN_STEP))
            if then_next:
                self._run_ahead(step + 1, scale, apply_kind)
            t0 = time.monotonic()
            try:
                return await running, applying
            except StepStalled as stall:
                _dropped(applying)
                self.drop_ahead()
                await self._stalled(step, stall, t0)
            except BaseException:
                _dropped(applying)
                self.drop_ahead()
                raise

    def _run_ahead(self, step: int, scale: float, behind: str) -> None:
        """Send `step`'s RunStep right behind the update before it (of kind `behind`)."""
        self.ahead = RunAhead(step, scale, asyncio.ensure_future(self._run_once(step, scale, behind=behind)))

    async def _replies(self, step: int, scale: float) -> list[PNodeReply]:
        """Every PNode's RunStep reply: of the one sent ahead, when it is this step's at this scale, and
        sent again while it stalls on messages lost with a nats-server."""
        ahead = self._take_ahead(step, scale)
        t0 = time.monotonic()
        while True:
            try:
                return await (ahead.replies if ahead is not None else self._run_once(step, scale))
            except StepStalled as stall:
                await self._stalled(step, stall, t0)
                ahead, t0 = None, time.monotonic()
            except BaseException:
                if ahead is not None:
                    ahead.drop()
                raise

    def _take_ahead(self, step: int, scale: float) -> RunAhead | None:
        """The RunStep sent ahead, when it is `step`'s at `scale` (else it is dropped)."""
        ahead, self.ahead = self.ahead, None
        if ahead is not None and (ahead.step, ahead.scale) != (step, scale):
            ahead.drop()
            return None
        return ahead

    async def _stalled(self, step: int, stall: StepStalled, since: float) -> None:
        """`step` stalls on messages lost with a nats-server: recorded, to be run again."""
        log.warning("session %s: step %d stalled (%s); running it again after %.1fs",
                    self.recorder.state.id, step, stall, time.monotonic() - since)
        await self.recorder.record(StepAborted(step=step, reason=f"{stall}; run again"))

    def _run_once(self, step: int, scale: float, behind: str | None = None):
        """One RunStep per PNode; `behind`: the kind of the ApplyStep of `step - 1` sent just before it."""
        after = step - 1 if behind else None
        return self.pnodes.all(lambda p: RunStep(session_id=self.recorder.state.id, step=step, loss_scale=scale,
                                                 after_apply=after), behind=behind)

    async def _scaler_before(self, step: int) -> LossScaler:
        """The loss scaler as it stands before `step`."""
        if self.scaler is None or self.scaler_step != step:
            config = self.recorder.state.config.loss_scale
            events = standing(await self.recorder.events())  # without what a quarantine superseded
            self.scaler, self.scaler_step = replay(config, self.dynamic_scaling, events, before_step=step), step
        return self.scaler


def micro_batch_sum(replies: list[PNodeReply]) -> float:
    """The step's summed loss, added micro-batch by micro-batch in index order: the same additions
    whichever PNodes and replicas computed which micro-batches."""
    losses = sorted((m, loss) for r in replies for m, loss in r.micro_losses.items())
    return sum(loss for _, loss in losses)
