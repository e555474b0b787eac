"""Checkpoint objects in the Object Store, as bytes: their names and a digest-checked read. No torch,
so the real PNode and the simulated one read checkpoints the same way."""

from __future__ import annotations

from nats.js.errors import ObjectNotFoundError
from nats.js.object_store import ObjectStore

from computeall.protocol.bus_failover import through_failover
from computeall.protocol.object_store import CheckpointObject
from computeall.protocol.wire import digest


class CheckpointObjectError(ValueError):
    """A checkpoint object is missing or its bytes are not the ones the log recorded."""


def object_name(session_id: str, step: int, vnode: str, replica: int = 0, suffix: str = "safetensors") -> str:
    """Replica 0's objects (all of them, but for diloco's) in the step's folder, another replica's in its own."""
    folder = f"{session_id}/{step:08d}" if replica == 0 else f"{session_id}/{step:08d}/replica-{replica}"
    return f"{folder}/{vnode}.{suffix}"


async def fetch(store: ObjectStore, bucket: str, entry: CheckpointObject) -> bytes:
    """One object's bytes; `CheckpointObjectError` when it is missing or its digest does not match the log."""
    try:
        data = (await through_failover(lambda: store.get(entry.object), f"reading {entry.object}")).data
    except ObjectNotFoundError:
        raise CheckpointObjectError(f"checkpoint object {entry.object} is missing from {bucket}") from None
    if digest(data) != entry.digest:
        raise CheckpointObjectError(f"checkpoint object {entry.object} is corrupted (digest mismatch)")
    return data
