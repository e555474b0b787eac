"""A session that starts from another model's weights (`config.init_from`).

At create, a source session must exist for the creator and keep the named checkpoint
(`check_source` refuses the command otherwise). At the first start, before any PNode loads
anything, the session's dataset must speak the tokenizer the weights were trained with: the
same token ids for the same text. Then the weights are copied into the session's own bucket (its
PNodes reach no other), every PNode loads its VNodes' weights (the optimizer starts fresh),
`InitializedFrom` records where they came from, and the caller commits checkpoint 0, so failover,
resume and replay never need the source again.
"""

from __future__ import annotations

from dataclasses import dataclass

from computeall.network import NetworkError, load_network
from computeall.protocol.config import InitFrom
from computeall.protocol.dataset_api import session_dataset
from computeall.protocol.dataset_client import get_dataset
from computeall.protocol.eventlog import EventLog
from computeall.protocol.events import InitializedFrom
from computeall.protocol.object_store import CheckpointObject, uploads_bucket
from computeall.protocol.pnode_api import LoadCheckpoint
from computeall.protocol.session_log import SessionLog
from computeall.protocol.session_state import Rejected, SessionState

from .errors import SessionError
from .preparation import Prepared, dataset_call
from .recorder import SessionRecorder
from .session_pnodes import SessionPNodes
from .session_storage import ObjectDamaged, SessionStorage


class SourceError(ValueError):
    """The source of `init_from` is not there (any more) for this session; the message says why."""


async def check_source(eventlog: EventLog, init: InitFrom | None, owner: str) -> None:
    """At create: refuse a source session that does not exist, is another user's, or keeps no such checkpoint,
    and uploaded weights anywhere but the uploads bucket (the one place a user may write)."""
    if init is not None and init.uploaded is not None and init.uploaded.bucket != uploads_bucket(eventlog.subjects, owner):
        raise Rejected(f"--init-from: uploaded weights are read from your uploads bucket {uploads_bucket(eventlog.subjects, owner)} only")
    if init is None or init.session_id is None:
        return
    try:
        await _source_checkpoint(eventlog, init, owner)
    except SourceError as exc:
        raise Rejected(f"--init-from: {exc}") from None


@dataclass(eq=False)
class InitialWeights:
    recorder: SessionRecorder
    pnodes: SessionPNodes
    prepared: Prepared
    storage: SessionStorage

    async def load(self) -> None:
        """Every PNode loads its VNodes' weights from the source; `InitializedFrom` is recorded."""
        state = self.recorder.state
        init = state.config.init_from
        eventlog = self.recorder.session.eventlog
        try:
            source_state, bucket, objects = await self._source(eventlog, state)
        except SourceError as exc:
            raise SessionError(f"cannot start from {init.describe()}: {exc}") from None
        await self._check_tokenizer(init, source_state)
        try:
            copies = await self.storage.take_in(bucket, objects)
        except ObjectDamaged as exc:
            raise SessionError(f"cannot start from {init.describe()}: {exc}") from None
        request = LoadCheckpoint(session_id=state.id, step=0, bucket=self.storage.bucket, objects=copies, weights_only=True)
        try:
            await self.pnodes.all(lambda p: request, timeout=300.0)
        except SessionError as exc:
            raise SessionError(f"the weights of {init.describe()} do not fit this session's network: {exc}") from None
        finally:
            await self.storage.delete(copies)  # checkpoint 0, which follows, holds them from now on
        await self.recorder.record(InitializedFrom(
            source=init.describe(), session_id=init.session_id, step=init.step, bucket=bucket, objects=objects,
        ))

    async def _source(self, eventlog: EventLog, state: SessionState) -> tuple[SessionState | None, str, list[CheckpointObject]]:
        init = state.config.init_from
        if init.uploaded:
            return None, init.uploaded.bucket, init.uploaded.objects
        source, checkpoint = await _source_checkpoint(eventlog, init, state.owner)
        return source, checkpoint.bucket, checkpoint.model_objects

    async def _check_tokenizer(self, init: InitFrom, source: SessionState | None) -> None:
        """The weights' token ids must mean what the session's dataset means by them."""
        if init.uploaded:
            theirs, whose = init.uploaded.tokenizer_digest, f"the tokenizer.json of {init.uploaded.source}"
            hint = "a dataset tokenized with it: `computeall dataset create NAME --files ... --tokenizer-file DIR/tokenizer.json`, then --dataset NAME"
        else:
            try:
                vocab = load_network(source.config.network_yaml).vocab_size
            except NetworkError as exc:
                raise SessionError(f"the network of session {source.id} does not load: {exc}") from None
            name = session_dataset(source.config.data, vocab, source.owner)
            calls = self.pnodes.calls
            manifest = await dataset_call(lambda: get_dataset(calls.nc, calls.subjects, source.owner, name, timeout=30.0))
            theirs, whose = manifest["tokenizer"]["digest"], f"session {source.id}'s dataset {name}"
            hint = f"`computeall dataset create NAME --files ... --tokenizer-from {name}`, then --dataset NAME"
        if theirs != self.prepared.tokenizer_digest:
            raise SessionError(
                f"dataset {self.prepared.dataset} has another tokenizer than {whose}, so the weights of "
                f"{init.describe()} would read its token ids as other words; train on {hint}"
            )


async def _source_checkpoint(eventlog: EventLog, init: InitFrom, owner: str | None):
    """The source session and its kept checkpoint at `init.step`."""
    source = SessionLog(eventlog, init.session_id)
    try:
        state = await source.refresh()
    except ValueError as exc:  # an id that is no subject token
        raise SourceError(str(exc)) from None
    if state.config is None or state.owner != owner:
        raise SourceError(f"there is no session {init.session_id} of yours")
    kept = {c.step: c for c in state.checkpoints}
    if init.step not in kept:
        listed = ", ".join(map(str, sorted(kept))) or "none"
        raise SourceError(f"session {init.session_id} keeps no checkpoint at step {init.step} (kept: {listed})")
    return state, kept[init.step]
