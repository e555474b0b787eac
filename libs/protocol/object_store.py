"""The JetStream Object Store buckets of a deployment (checkpoints, dataset shards, uploaded files)."""

from __future__ import annotations

import dataclasses
from typing import IO

from nats.js import JetStreamContext
from nats.js.api import ObjectStoreConfig, StorageType
from nats.js.errors import BucketNotFoundError, DigestMismatchError, ObjectNotFoundError
from nats.js.object_store import ObjectStore
from pydantic import BaseModel

from .bus_failover import through_failover
from .subjects import Subjects, check_token
from .wire import digester


class CheckpointObject(BaseModel):
    """One VNode's safetensors object in a bucket, as a checkpoint (or uploaded weights) names it."""

    vnode: str
    object: str  # name in the bucket
    digest: str  # blake2b-128 of the object's bytes
    bytes: int
    replica: int = 0  # whose state: diloco's replicas each write theirs; otherwise the first writes for all


def checkpoint_bucket(subjects: Subjects, session_id: str) -> str:
    """A session's own bucket: its checkpoints, and whatever its PNodes load (weights it starts from are
    copied in). NATS grants by bucket, so one per session is what lets exactly its PNodes reach it."""
    return f"{subjects.prefix}-checkpoints-{check_token(session_id, 'session id')}"


def dataset_bucket(subjects: Subjects) -> str:
    """Where the dataset service keeps tokenizers and shards (its `--bucket` can name another)."""
    return f"{subjects.prefix}-datasets"


def uploads_bucket(subjects: Subjects, user: str) -> str:
    """Where `user` puts the files a dataset is made from (`protocol.uploads`): a bucket per user, so the
    server's permissions keep each user's uploads from every other user. The dataset service creates it
    (`dataset_api.OpenUploads`) and reads it."""
    return f"{subjects.prefix}-uploads-{check_token(user, 'user name')}"


async def open_bucket(js: JetStreamContext, bucket: str, replicas: int = 1) -> ObjectStore:
    """The bucket, created on first use (file storage: checkpoints survive a restart) at `replicas`
    copies (`bus.replicas`), or raised to `replicas` when it has fewer (a bus grown from 1 server to
    3). Only the service that owns a bucket creates it; the others use `existing_bucket`. Rides out a
    failover of the bus: every try looks again at what the last one left."""

    async def attempt() -> ObjectStore:
        try:
            store = await js.object_store(bucket)
        except BucketNotFoundError:
            config = ObjectStoreConfig(bucket=bucket, storage=StorageType.FILE, replicas=replicas)
            return await js.create_object_store(bucket, config)
        info = await js.stream_info(f"OBJ_{bucket}")
        if info.config.num_replicas < replicas:
            await js.update_stream(dataclasses.replace(info.config, num_replicas=replicas))
        return store

    return await through_failover(attempt, f"opening bucket {bucket}")


async def existing_bucket(js: JetStreamContext, bucket: str) -> ObjectStore:
    """A bucket its owning service created; `BucketNotFoundError` when it has not yet. Looking it
    up is a JetStream call like any other: it rides out a failover of the bus (a checkpoint save
    that began while one server of three died once failed its session on this lookup's timeout)."""
    return await through_failover(lambda: js.object_store(bucket), f"opening bucket {bucket}")


class ObjectDamaged(ValueError):
    """A stored object is missing, or its bytes are not the ones the log recorded; the message says which."""


class _Digesting:
    """Where `ObjectStore.get` writes an object's chunks: they are hashed, and kept in `file` when one is given."""

    def __init__(self, file: IO[bytes] | None) -> None:
        self.file = file
        self.hash = digester()

    def write(self, chunk: bytes) -> None:
        self.hash.update(chunk)
        if self.file is not None:
            self.file.write(chunk)


async def read_checked(store: ObjectStore, bucket: str, entry: CheckpointObject, file: IO[bytes] | None) -> None:
    """Stream `entry`'s object into `file` (or only hash it, with None), a chunk at a time: the object is
    never whole in memory. `ObjectDamaged` when it is missing or its digest is not the log's. Rides out a
    failover of the bus, the file rewritten from its start on each try."""
    start = file.tell() if file is not None else 0

    async def attempt() -> _Digesting:
        if file is not None:
            file.seek(start)
            file.truncate()
        sink = _Digesting(file)
        await store.get(entry.object, writeinto=sink)
        return sink

    try:
        sink = await through_failover(attempt, f"reading {entry.object}")
    except ObjectNotFoundError:
        raise ObjectDamaged(f"object {entry.object} is missing from {bucket}") from None
    except DigestMismatchError:
        raise ObjectDamaged(f"object {entry.object} in {bucket} is corrupted (its chunks do not add up)") from None
    if sink.hash.hexdigest() != entry.digest:
        raise ObjectDamaged(f"object {entry.object} in {bucket} is corrupted (digest mismatch with the log)")


async def put_file(store: ObjectStore, name: str, file: IO[bytes]) -> None:
    """Put `file`, from its start, as object `name`, streamed in the store's chunks; rides out a failover
    of the bus (rewriting an object is harmless)."""

    async def attempt() -> None:
        file.seek(0)
        await store.put(name, file)

    await through_failover(attempt, f"writing {name}")
