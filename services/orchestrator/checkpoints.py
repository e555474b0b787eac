"""A session's checkpoints: save on every PNode then commit, prune the oldest, restore the newest intact.

A checkpoint counts only once `CheckpointCommitted` is in the log, which happens after every
PNode wrote its objects into the session's bucket (`session_storage`). Pruning records
`CheckpointPruned` before any object is deleted, so the log never names an object that is gone. A
checkpoint that does not load is read by the orchestrator itself: found damaged, it no longer counts
(`CheckpointDiscarded`), so the steps since the one before are run again and saved anew.
"""

from __future__ import annotations

import logging
import time

import nats.errors

from computeall.protocol.events import CheckpointCommitted, CheckpointDiscarded, CheckpointPruned
from computeall.protocol.pnode_api import LoadCheckpoint, SaveCheckpoint
from computeall.protocol.session_log import SessionLog

from .errors import SessionError
from .initial_weights import InitialWeights
from .placement import Placement
from .recorder import SessionRecorder
from .session_pnodes import SessionPNodes
from .session_storage import ObjectDamaged, SessionStorage

log = logging.getLogger("computeall.orchestrator.checkpoints")


class Checkpoints:
    def __init__(self, recorder: SessionRecorder, pnodes: SessionPNodes, placement: Placement,
                 storage: SessionStorage, initial: InitialWeights | None = None) -> None:
        self.recorder = recorder
        self.pnodes = pnodes
        self.placement = placement
        self.storage = storage
        self.initial = initial  # where a session that starts from another model's weights gets them
        self.pinned: set[int] = set()  # steps still being read (for samples): pruned at a later save

    async def save(self, step: int) -> None:
        state = self.recorder.state
        if state.config.replay_of:
            return  # a verification run changes nothing worth keeping
        if any(c.step == step for c in state.checkpoints):
            # already have exactly this state (a re-run after a rollback makes the same bits); and PNodes
            # could not write it again: they never write over an object
            return
        t0 = time.monotonic()
        bucket = self.storage.bucket
        await self.storage.sweep({o.object for c in state.checkpoints for o in c.objects})  # PNodes never replace
        # every replica holds the same state: one of them writes it (diloco's replicas each hold their own)
        replies = await self.pnodes.all(lambda p: SaveCheckpoint(session_id=state.id, step=step, bucket=bucket),
                                        timeout=300.0, first_replica=state.config.sync.mode != "diloco")
        objects = [o for r in replies for o in (r.checkpoint or [])]
        # only now, with every object written, does the checkpoint exist
        await self.recorder.record(CheckpointCommitted(step=step, bucket=bucket, objects=objects, seconds=time.monotonic() - t0))
        await self._prune()

    async def _prune(self) -> None:
        """Keep the newest `keep_checkpoints`, and in a verified session for each PNode the newest none
        of its results can have reached (where catching it would roll back to); the log says pruned
        before any object is deleted."""
        state = self.recorder.state
        keep = {c.step for c in state.checkpoints[-state.config.keep_checkpoints:]} | self.pinned
        if state.config.verify.on:
            keep |= {state.clean_checkpoint({p}) for p in state.pnodes_in_state}
        excess = [c for c in state.checkpoints if c.step not in keep]
        for old in excess:
            await self.recorder.record(CheckpointPruned(step=old.step))
        await self.delete_objects(excess)

    async def delete_objects(self, gone: list[CheckpointCommitted]) -> None:
        """Delete the objects of checkpoints the log no longer counts (pruned or discarded)."""
        await self.storage.delete(o for old in gone for o in old.objects)

    async def restore(self, clean_of: set[str] = frozenset()) -> int:
        """Load the newest checkpoint whose objects are intact (and that no result of `clean_of` can
        have reached); the step to continue from (0: none, and then the initial weights, when the
        session starts from another model's)."""
        state = self.recorder.state
        candidates = [c for c in await self._candidates() if not clean_of & set(state.checkpoint_pnodes.get(c.step, []))]
        for checkpoint in reversed(candidates):
            if await self._load(checkpoint):
                log.info("session %s: loaded the checkpoint at step %d", state.id, checkpoint.step)
                return checkpoint.step
            await self.placement.load_plan()  # back to a clean, freshly initialised stage
        if self.initial:
            await self.initial.load()
            await self.save(0)  # from now on the session's own checkpoints are all it needs
        return 0

    async def _load(self, checkpoint: CheckpointCommitted) -> bool:
        """Whether every PNode loaded `checkpoint`. A checkpoint of another session (the one a verification
        run replays) is copied into this session's bucket first: the only one its PNodes reach."""
        state = self.recorder.state
        own = checkpoint.bucket == self.storage.bucket
        try:
            objects = checkpoint.objects if own else await self.storage.take_in(checkpoint.bucket, checkpoint.objects)
        except ObjectDamaged as exc:
            log.warning("session %s: checkpoint at step %d unusable (%s); trying an older one", state.id, checkpoint.step, exc)
            return False
        request = LoadCheckpoint(session_id=state.id, step=checkpoint.step, bucket=self.storage.bucket, objects=objects)
        try:
            await self.pnodes.all(lambda p: request, timeout=300.0)
            return True
        except SessionError as exc:
            log.warning("session %s: checkpoint at step %d unusable (%s); trying an older one", state.id, checkpoint.step, exc)
        finally:
            if not own:
                await self.storage.delete(objects)  # loaded or not, the copy has served
        if own:
            await self._discard_if_damaged(checkpoint)
        return False

    async def _discard_if_damaged(self, checkpoint: CheckpointCommitted) -> None:
        """Read the checkpoint here; damaged, it no longer counts and its objects go (a PNode that failed
        to load an intact one discards nothing: it may be lying, or failing for another reason)."""
        try:
            damage = await self.storage.damage(checkpoint.objects)
        except (nats.errors.Error, TimeoutError) as exc:
            log.warning("session %s: could not check the checkpoint at step %d: %s", self.recorder.state.id,
                        checkpoint.step, exc)
            return
        if damage is None:
            return
        await self.recorder.record(CheckpointDiscarded(step=checkpoint.step, reason=damage))
        await self.delete_objects([checkpoint])

    async def _candidates(self) -> list[CheckpointCommitted]:
        """This session's checkpoints, oldest first; a verification run's come from the session it replays."""
        state = self.recorder.state
        replay = state.config.replay_of
        if not replay:
            return state.checkpoints
        original = SessionLog(self.recorder.session.eventlog, replay.session_id)
        await original.refresh()
        checkpoints = [c for c in original.state.checkpoints if c.step <= replay.from_step]
        if not checkpoints and replay.from_step > 0:
            kept = ", ".join(str(c.step) for c in original.state.checkpoints) or "none"
            raise SessionError(f"session {replay.session_id} keeps no checkpoint at or before step {replay.from_step} (kept: {kept})")
        return checkpoints
