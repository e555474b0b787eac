"""Checkpoint objects in the Object Store: their names and digest-checked reads, streamed through a file
or into bytes. No torch, so the real PNode and the simulated one read checkpoints the same way."""

from __future__ import annotations

import io
from typing import IO

from nats.js.object_store import ObjectStore

from computeall.protocol.object_store import CheckpointObject, ObjectDamaged, read_checked


class CheckpointObjectError(ValueError):
    """A checkpoint object is missing or its bytes are not the ones the log recorded."""


def object_name(session_id: str, step: int, vnode: str, replica: int = 0, suffix: str = "safetensors") -> str:
    """Replica 0's objects (all of them, but for diloco's) in the step's folder, another replica's in its own."""
    folder = f"{session_id}/{step:08d}" if replica == 0 else f"{session_id}/{step:08d}/replica-{replica}"
    return f"{folder}/{vnode}.{suffix}"


async def fetch_into(store: ObjectStore, bucket: str, entry: CheckpointObject, file: IO[bytes]) -> None:
    """One object's bytes into `file`, a chunk at a time; `CheckpointObjectError` when it is missing or its
    digest does not match the log."""
    try:
        await read_checked(store, bucket, entry, file)
    except ObjectDamaged as exc:
        raise CheckpointObjectError(f"checkpoint {exc}") from None
    file.seek(0)


async def fetch(store: ObjectStore, bucket: str, entry: CheckpointObject) -> bytes:
    """One (small) object's bytes, as `fetch_into`."""
    buffer = io.BytesIO()
    await fetch_into(store, bucket, entry, buffer)
    return buffer.getvalue()
