"""Checkpoints of a session stage: one safetensors object per hosted VNode, digests checked on load.

Replicas that sum gradients hold the same state, and only the first writes it; diloco's replicas
differ between outer steps, so each writes its own objects (`replica`), and loads its own, or the
first replica's when the checkpoint has none for it (the replica count grew)."""

from __future__ import annotations

from nats.js import JetStreamContext
from safetensors.torch import load as load_tensors
from safetensors.torch import save as save_tensors

from computeall.protocol.bus_failover import through_failover
from computeall.protocol.events import CheckpointObject
from computeall.protocol.object_store import existing_bucket
from computeall.protocol.pnode_api import LoadCheckpoint, SaveCheckpoint
from computeall.protocol.wire import digest
from computeall.tensorcore.checkpoint import CheckpointError, load_vnode, save_vnode
from computeall.tensorcore.head_state_mapping import StateMappingError, source_vnodes, vnode_state

from .checkpoint_objects import fetch, object_name
from .stage import SessionStage


def _replica(stage: SessionStage) -> int:
    return stage.plan.replicas.index if stage.plan.replicas else 0


async def save(js: JetStreamContext, stage: SessionStage, request: SaveCheckpoint) -> list[CheckpointObject]:
    store = await existing_bucket(js, request.bucket)
    objects, replica = [], _replica(stage)
    await stage.replica_sum.settled()  # diloco: an outer step still to land is saved whole
    for vid in stage.local:
        data = await stage._compute(save_vnode, stage.runtime, stage.optimizer, vid, stage.replica_sum.outer)
        name = object_name(request.session_id, request.step, vid, replica)
        await through_failover(lambda: store.put(name, data), f"writing {name}")  # rewriting it is harmless
        objects.append(CheckpointObject(vnode=vid, object=name, digest=digest(data), bytes=len(data), replica=replica))
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
        if same_topology or source_vnodes(spec, vid) == [vid]:
            if vid not in by_vnode:
                raise CheckpointError(f"checkpoint at step {request.step} has no object for {vid}")
            data = await fetch(store, request.bucket, by_vnode[vid])
        else:  # the checkpoint may come from the other topology (heads fused or not): map it
            objects = {s: load_tensors(await fetch(store, request.bucket, by_vnode[s])) for s in sources}
            try:
                data = save_tensors(await stage._compute(vnode_state, objects, spec, vid))
            except StateMappingError as exc:
                raise CheckpointError(f"checkpoint at step {request.step} cannot be mapped onto {vid}: {exc}") from None
        await stage._compute(load_vnode, stage.runtime, stage.optimizer, vid, data, request.weights_only,
                             stage.replica_sum.outer)
