"""Drives one session from its log: claim, data, placement, checkpoint reload, then steps.

Every decision is an event appended with the session's expected sequence (`SessionLog`);
between steps the driver folds whatever others recorded (pause, stop and validation
requests), so it holds no state the log does not have. When a PNode goes silent the step
in flight is aborted, the network is placed on the live PNodes and every PNode goes back to
the last committed checkpoint: batches and math are deterministic, so the session ends as if
nothing had happened.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import math
import time
from pathlib import Path

import nats.errors
from pydantic import BaseModel

from computeall.network import Graph, NetworkError, load_network
from computeall.network.head_fusion import fuse_heads
from computeall.protocol.dataset_api import CreateDataset
from computeall.protocol.dataset_client import DatasetError, create_dataset, get_dataset
from computeall.protocol.eventlog import ConcurrencyError
from computeall.protocol.events import (
    CheckpointCommitted,
    CheckpointPruned,
    EventEnvelope,
    LossScaleChanged,
    PNodeLost,
    PNodeSlow,
    RolledBack,
    SessionClaimed,
    SessionCompleted,
    SessionFailed,
    SessionPaused,
    SessionStopped,
    StepAborted,
    StepCompleted,
    StepSkipped,
    ValidationCompleted,
)
from computeall.protocol.object_store import checkpoint_bucket, open_bucket
from computeall.protocol.pnode_api import ApplyStep, LoadCheckpoint, RunStep, RunValidation, SaveCheckpoint, Unload
from computeall.protocol.session_state import SessionLog
from computeall.protocol.subjects import Subjects

from .errors import DriverDone, LostClaim, PNodeFailure, SessionError
from .loss_scale import LossScaler, replay, uses_dynamic_scaling
from .placement import Placement
from .pnode_calls import PNodeCalls
from .pnodes import PNodeRegistry

log = logging.getLogger("computeall.orchestrator.driver")


class SessionDriver:
    def __init__(
        self,
        calls: PNodeCalls,
        subjects: Subjects,
        session: SessionLog,
        registry: PNodeRegistry,
        orchestrator_id: str,
        takeover_from: str | None = None,
        pnode_wait_s: float = 120.0,
    ) -> None:
        self.calls = calls
        self.nc = calls.nc
        self.subjects = subjects
        self.session = session
        self.registry = registry
        self.orchestrator_id = orchestrator_id
        self.takeover_from = takeover_from  # the claimant we saw (None or a dead orchestrator)
        self.pnode_wait_s = pnode_wait_s
        self.placement: Placement | None = None
        self.scaler: LossScaler | None = None
        self._scaler_step = -1  # the step the scaler's state is for

    @property
    def state(self):
        return self.session.state

    @property
    def pnodes(self) -> list[str]:
        return self.placement.pnodes if self.placement else []

    async def record(self, payload: BaseModel) -> None:
        """Append an event; if others appended first, fold theirs and retry while we still hold the claim."""
        for _ in range(10):
            event = EventEnvelope(actor=f"orchestrator:{self.orchestrator_id}", session_id=self.state.id, payload=payload)
            try:
                await self.session.append(event)
                return
            except ConcurrencyError:
                await self.session.refresh()
                claimant = self.state.claimed_by
                if isinstance(payload, SessionClaimed):
                    if claimant not in (None, self.takeover_from, self.orchestrator_id):
                        raise LostClaim(f"session {self.state.id} was claimed by {claimant}") from None
                elif claimant != self.orchestrator_id:
                    raise LostClaim(f"session {self.state.id} is driven by {claimant}") from None
        raise LostClaim(f"session {self.state.id}: too many concurrent appends")

    async def run(self) -> None:
        try:
            await self._claim_and_drive()
        except (LostClaim, DriverDone) as exc:
            log.info("session %s: %s", self.state.id, exc)
        except SessionError as exc:
            log.error("session %s failed: %s", self.state.id, exc)
            await self.record(SessionFailed(reason=str(exc)))
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug must still end the session visibly, never leave it hanging
            log.exception("session %s: internal error", self.state.id)
            await self.record(SessionFailed(reason=f"internal error: {type(exc).__name__}: {exc}"))
        finally:
            for pnode in self.pnodes:
                try:
                    await self.calls.one(pnode, Unload(session_id=self.state.id), timeout=10.0)
                except (SessionError, PNodeFailure):
                    pass

    async def _claim_and_drive(self) -> None:
        await self.session.refresh()
        if self.state.status != "running" or self.state.claimed_by != self.takeover_from:
            return  # finished meanwhile, or another orchestrator claimed it first
        if await self._honour_requests_without_state():
            return
        checkpoint = self.state.last_checkpoint
        await self.record(SessionClaimed(orchestrator=self.orchestrator_id, resume_from_step=checkpoint.step if checkpoint else 0))
        graph, dataset = await self._prepare()
        self.placement = Placement(self, graph, dataset)
        await self._wait_for_pnodes()
        try:
            step = await self.placement.place(reason="start")
        except PNodeFailure as failure:
            step = await self._recover(failure, 0)
        await self._train(step)

    async def _honour_requests_without_state(self) -> bool:
        """A stop or pause asked while nobody drove the session: the last checkpoint stands."""
        at = self.state.last_checkpoint.step if self.state.last_checkpoint else 0
        if self.state.stop_requested:
            await self.record(SessionStopped(step=at))
            return True
        if self.state.pause_requested:
            await self.record(SessionPaused(step=at))
            return True
        return False

    # -- set-up ---------------------------------------------------------------------
    async def _prepare(self) -> tuple[Graph, str]:
        config = self.state.config
        try:
            spec = load_network(config.network_yaml)
        except NetworkError as exc:
            raise SessionError(str(exc)) from None
        if config.precision:
            for v in spec.vnodes:
                v.precision = config.precision
        if self.state.fuse_heads:  # before allocation: the allocator places the fused VNodes
            spec, lines = fuse_heads(spec)
            for line in lines:
                log.info("session %s: %s", self.state.id, line)
        if config.data.dataset:
            manifest = await self._dataset_call(lambda: get_dataset(self.nc, self.subjects, config.data.dataset, timeout=30.0))
        else:
            request = CreateDataset(
                name=files_dataset_name(config.data.files, spec.vocab_size),
                files=config.data.files,
                vocab_size=spec.vocab_size,
                if_exists="reuse",
            )
            manifest = await self._dataset_call(lambda: create_dataset(self.nc, self.subjects, request, timeout=3600.0))
        if manifest["vocab_size"] > spec.vocab_size:
            raise SessionError(
                f"dataset {manifest['name']} has {manifest['vocab_size']} tokens but network {spec.name} "
                f"embeds only {spec.vocab_size}; raise the network's vocab_size"
            )
        return Graph(spec), manifest["name"]

    async def _dataset_call(self, call, wait_s: float = 60.0) -> dict:
        """Call the dataset service, waiting for it to come up (it may start after us)."""
        deadline = time.monotonic() + wait_s
        while True:
            try:
                return await call()
            except DatasetError as exc:
                raise SessionError(f"dataset: {exc}") from None
            except nats.errors.NoRespondersError:
                if time.monotonic() > deadline:
                    raise SessionError(
                        f"no dataset service answered for {wait_s:.0f}s; is it running? (`computeall status`)"
                    ) from None
                await asyncio.sleep(0.5)
            except (nats.errors.TimeoutError, asyncio.TimeoutError):
                raise SessionError("the dataset service did not answer in time; see its log") from None

    async def _wait_for_pnodes(self) -> None:
        """At the first start, for `min_pnodes`; when taking a session up again, a few seconds for the
        PNodes it used before (after a restart they register again), then whatever is live."""
        if self.state.allocation:
            before = set(self.state.allocation.values())
            deadline = time.monotonic() + 2 * self.registry.timeout_s
            while time.monotonic() < deadline and not before <= {hb.pnode for hb in self.registry.live()}:
                await asyncio.sleep(0.2)
            want = 1
        else:
            want = self.state.config.min_pnodes
        deadline = time.monotonic() + self.pnode_wait_s
        while len(self.registry.live()) < want:
            if time.monotonic() > deadline:
                raise SessionError(
                    f"waited {self.pnode_wait_s:.0f}s for {want} PNodes, {len(self.registry.live())} are live; "
                    "start more with `computeall pnode --nats URL`"
                )
            await asyncio.sleep(0.2)

    # -- the step loop ------------------------------------------------------------------
    async def _train(self, step: int) -> None:
        config = self.state.config
        end = config.replay_of.to_step if config.replay_of else config.steps
        while True:
            try:
                if await self._boundary(step):
                    return
                if step >= end:
                    await self.checkpoint(step)  # the final state, kept like any other checkpoint
                    break
                await self._step(step)
                step += 1
                at_checkpoint = bool(config.checkpoint_every) and step % config.checkpoint_every == 0 and step < end
                if at_checkpoint:
                    await self.checkpoint(step)
                if config.validate_every and step % config.validate_every == 0:
                    await self._validate(step)
                await self.placement.rebalance(step, at_checkpoint)
            except PNodeFailure as failure:
                step = await self._recover(failure, step)
        await self.record(SessionCompleted(steps=step, final_loss=self.state.last_loss))
        log.info("session %s completed at loss %.4f", self.state.id, self.state.last_loss or float("nan"))

    async def _boundary(self, step: int) -> bool:
        """Fold what others recorded and act on it; True when the driver is done."""
        await self.session.refresh()
        if self.state.claimed_by != self.orchestrator_id:
            raise LostClaim(f"session {self.state.id} is driven by {self.state.claimed_by}")
        if self.state.stop_requested:
            await self.checkpoint(step)
            await self.record(SessionStopped(step=step))
            return True
        if self.state.pause_requested:
            await self.checkpoint(step)
            await self.record(SessionPaused(step=step))
            return True
        if self.state.validation_requested:
            await self._validate(step)
        return False

    async def _recover(self, failure: PNodeFailure, step: int) -> int:
        """Abort the step, place the network on the live PNodes, roll everyone back; the step to go on from."""
        while True:
            for pnode in failure.pnodes:
                await self.record(PNodeLost(pnode=pnode, step=step, silent_s=min(self.registry.silent_s(pnode), 1e9)))
            await self.record(StepAborted(step=step, reason=str(failure)))
            log.warning("session %s: %s; recovering", self.state.id, failure)
            try:
                restored = await self.placement.place(reason=f"lost {', '.join(failure.pnodes)}", exclude=set(failure.pnodes))
            except PNodeFailure as again:
                failure = again
                continue
            await self.record(RolledBack(to_step=restored, from_step=max(step, self.state.next_step)))
            return restored

    async def _step(self, step: int) -> None:
        config = self.state.config
        lr = config.lr.at(step, config.steps)
        t0 = time.monotonic()
        scaler = await self._loss_scaler(step)
        scale = scaler.scale
        replies = await self._all(lambda p: RunStep(session_id=self.state.id, step=step, loss_scale=scale))
        overflowed = sorted(r.pnode for r in replies if not r.grads_finite)
        decision = scaler.update(bool(overflowed))  # one decision, every PNode applies or skips
        self._scaler_step = step + 1
        await self._all(lambda p: ApplyStep(session_id=self.state.id, step=step, lr=lr, skip=not decision.apply))
        elapsed = time.monotonic() - t0
        tokens = sum(r.tokens for r in replies)
        loss = sum(r.loss_sum or 0.0 for r in replies) / max(1, tokens)
        if step < self.state.next_step:
            # re-run after a resume or a rollback: the log has this step already; a step is recorded once
            log.info("session %s: re-ran step %d, loss %.6f", self.state.id, step, loss)
            return
        compute = sum(r.compute_s for r in replies)
        if not decision.apply:
            await self.record(StepSkipped(step=step, reason=f"non-finite gradients on {', '.join(overflowed)}"))
        if decision.changed:
            await self.record(LossScaleChanged(step=step, old=decision.old, new=decision.new, reason=decision.reason))
        await self.record(
            StepCompleted(step=step, loss=loss, tokens=tokens, step_time_s=elapsed, lr=lr, loss_scale=decision.old,
                          compute_s=compute, wait_s=max(0.0, elapsed - compute))
        )

    async def _loss_scaler(self, step: int) -> LossScaler:
        """The loss scaler as it stands before `step`: kept from step to step, rebuilt from the log
        after any jump (start, resume, rollback). Re-run steps decide exactly as first time (same bits)."""
        if self.scaler is None or self._scaler_step != step:
            config = self.state.config.loss_scale
            dynamic = uses_dynamic_scaling(config, [v.precision for v in self.placement.graph.spec.vnodes])
            events = []
            for record in await self.session.eventlog.read(self.subjects.session_evt_all(self.state.id)):
                try:
                    events.append(EventEnvelope.model_validate_json(record.data).payload)
                except ValueError:
                    continue
            self.scaler, self._scaler_step = replay(config, dynamic, events, before_step=step), step
        return self.scaler

    async def _validate(self, step: int) -> None:
        batches = self.state.config.validation_batches
        replies = await self._all(lambda p: RunValidation(session_id=self.state.id, step=step, batches=batches))
        tokens = sum(r.tokens for r in replies)
        loss = sum(r.loss_sum or 0.0 for r in replies) / max(1, tokens)
        await self.record(ValidationCompleted(step=step, loss=loss, perplexity=math.exp(min(loss, 50.0)), tokens=tokens))

    async def checkpoint(self, step: int) -> None:
        if self.state.config.replay_of:
            return  # a verification run changes nothing worth keeping
        if self.state.last_checkpoint and self.state.last_checkpoint.step == step:
            return  # already have exactly this state
        t0 = time.monotonic()
        bucket = checkpoint_bucket(self.subjects)
        replies = await self._all(lambda p: SaveCheckpoint(session_id=self.state.id, step=step, bucket=bucket), timeout=300.0)
        objects = [o for r in replies for o in (r.checkpoint or [])]
        # only now, with every object written, does the checkpoint exist
        await self.record(CheckpointCommitted(step=step, bucket=bucket, objects=objects, seconds=time.monotonic() - t0))
        await self._prune(bucket)

    async def _prune(self, bucket: str) -> None:
        """Keep the newest `keep_checkpoints`; the log says pruned before any object is deleted."""
        excess = self.state.checkpoints[: -self.state.config.keep_checkpoints]
        if not excess:
            return
        store = await open_bucket(self.nc.jetstream(), bucket)
        for old in excess:
            await self.record(CheckpointPruned(step=old.step))
            for obj in old.objects:
                try:
                    await store.delete(obj.object)
                except Exception as exc:  # an object already gone is fine; the log no longer names it
                    log.warning("could not delete %s: %s", obj.object, exc)

    async def restore(self) -> int:
        """Load the newest checkpoint whose objects are intact; the step to continue from (0: none)."""
        checkpoints = self.state.checkpoints
        replay = self.state.config.replay_of
        if replay:  # a verification run starts from the other session's checkpoint
            original = SessionLog(self.session.eventlog, replay.session_id)
            await original.refresh()
            checkpoints = [c for c in original.state.checkpoints if c.step <= replay.from_step]
            if not checkpoints and replay.from_step > 0:
                kept = ", ".join(str(c.step) for c in original.state.checkpoints) or "none"
                raise SessionError(f"session {replay.session_id} keeps no checkpoint at or before step {replay.from_step} (kept: {kept})")
        for checkpoint in reversed(checkpoints):
            request = LoadCheckpoint(session_id=self.state.id, step=checkpoint.step, bucket=checkpoint.bucket,
                                     objects=checkpoint.objects)
            try:
                await self._all(lambda p: request, timeout=300.0)
                log.info("session %s: loaded the checkpoint at step %d", self.state.id, checkpoint.step)
                return checkpoint.step
            except SessionError as exc:
                log.warning("session %s: checkpoint at step %d unusable (%s); trying an older one",
                            self.state.id, checkpoint.step, exc)
                await self.placement.load_plan()  # back to a clean, freshly initialised stage
        return 0

    # -- requests to PNodes -------------------------------------------------------------
    async def _all(self, make, timeout: float | None = None):
        return await self.calls.all(
            self.pnodes, make, timeout, self.state.config.slow_after_s, self._slow, self.placement.generations
        )

    async def _slow(self, pnode: str, waited_s: float) -> None:
        log.warning("session %s: pnode %s still working after %.0fs", self.state.id, pnode, waited_s)
        await self.record(PNodeSlow(pnode=pnode, step=self.state.next_step, waited_s=waited_s))


def files_dataset_name(files: list[str], vocab_size: int) -> str:
    """A stable name for 'these files with this vocabulary', so a rerun reuses the dataset."""
    key = "\n".join(sorted(str(Path(f).resolve()) for f in files)) + f"\n{vocab_size}"
    return "files-" + hashlib.blake2b(key.encode(), digest_size=6).hexdigest()
