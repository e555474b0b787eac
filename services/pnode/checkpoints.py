"""Checkpoints of a session stage: one safetensors object per hosted VNode, digests checked on load.

A VNode's object is written tensor by tensor into a temporary file, hashed on the way, and the file
streamed into the Object Store; a load streams the object into a file and reads it back a parameter at
a time (`tensorcore.checkpoint`). So a save or a load holds a chunk and a tensor at a time, never a
VNode's state a second time.

Replicas that sum gradients hold the same state, and only the first writes it; diloco's replicas
differ between outer steps, so each writes its own objects (`replica`), and loads its own, or the
first replica's when the checkpoint has none for it (the replica count grew)."""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from contextlib import ExitStack
from typing import IO

import torch
from nats.js import JetStreamContext

from computeall.protocol.events import CheckpointObject
from computeall.protocol.object_store import existing_bucket, put_file
from computeall.protocol.pnode_api import LoadCheckpoint, SaveCheckpoint
from computeall.protocol.wire import digester
from computeall.tensorcore.checkpoint import CheckpointError, load_vnode, read_vnode, write_vnode
from computeall.tensorcore.head_state_mapping import StateMappingError, source_vnodes, vnode_state

from .checkpoint_objects import fetch_into, object_name
from .stage import SessionStage


def _replica(stage: SessionStage) -> int:
    return stage.plan.replicas.index if stage.plan.replicas else 0


class _Hashing:
    """A file that hashes what is written to it: the object's digest, as it is written."""

    def __init__(self, file: IO[bytes]) -> None:
        self.file = file
        self.hash = digester()

    def write(self, data: bytes | memoryview) -> int:
        self.hash.update(data)
        return self.file.write(data)


async def save(js: JetStreamContext, stage: SessionStage, request: SaveCheckpoint,
               deadline_s: float) -> list[CheckpointObject]:
    store = await existing_bucket(js, request.bucket)
    objects, replica = [], _replica(stage)
    await stage.replica_sum.settled(deadline_s)  # diloco: an outer step still to land is saved whole
    for vid in stage.local:
        name = object_name(request.session_id, request.step, vid, replica)
        with tempfile.TemporaryFile() as spool:
            out = _Hashing(spool)
            size = await stage._compute(write_vnode, out, stage.runtime, stage.optimizer, vid, stage.replica_sum.outer)
            await put_file(store, name, spool)
        objects.append(CheckpointObject(vnode=vid, object=name, digest=out.hash.hexdigest(), bytes=size, replica=replica))
    return objects


async def load(js: JetStreamContext, stage: SessionStage, request: LoadCheckpoint) -> None:
    """Raise `CheckpointError` when an object is missing or its digest does not match the log."""
    stage.replica_sum.close()  # nothing of the state it replaces goes on, diloco's sync in flight included
    store = await existing_bucket(js, request.bucket)
    replica = _replica(stage)
    if not any(o.replica == replica for o in request.objects):
        replica = 0
    by_vnode = {o.vnode: o for o in request.objects if o.replica == replica}

    spec = stage.graph.spec
    same_topology = set(by_vnode) == {v.id for v in spec.vnodes}
    for vid in stage.local:
        sources = [s for s in source_vnodes(spec, vid) if s in by_vnode]
        if not sources:
            raise CheckpointError(f"checkpoint at step {request.step} has no object for {vid}")
        with ExitStack() as spools:
            async def read(source: str) -> Mapping[str, torch.Tensor]:
                spool = spools.enter_context(tempfile.TemporaryFile())
                await fetch_into(store, request.bucket, by_vnode[source], spool)
                return read_vnode(source, spool)

            if same_topology or source_vnodes(spec, vid) == [vid]:
                if vid not in by_vnode:
                    raise CheckpointError(f"checkpoint at step {request.step} has no object for {vid}")
                tensors = await read(vid)
            else:  # the checkpoint may come from the other topology (heads fused or not): map it
                objects = {s: await read(s) for s in sources}
                try:
                    tensors = await stage._compute(vnode_state, objects, spec, vid)
                except StateMappingError as exc:
                    raise CheckpointError(f"checkpoint at step {request.step} cannot be mapped onto {vid}: {exc}") from None
            await stage._compute(load_vnode, stage.runtime, stage.optimizer, vid, tensors, request.weights_only,
                                 stage.replica_sum.outer)
