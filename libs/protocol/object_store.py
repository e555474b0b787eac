"""The JetStream Object Store buckets of a deployment (checkpoints, dataset shards, uploaded files)."""

from __future__ import annotations

import dataclasses

from nats.js import JetStreamContext
from nats.js.api import ObjectStoreConfig, StorageType
from nats.js.errors import BucketNotFoundError
from nats.js.object_store import ObjectStore
from pydantic import BaseModel

from .bus_failover import through_failover
from .subjects import Subjects, check_token


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
    3). Only the service that owns a bucket creates it; the others use `existing_bucket`."""
    try:
        store = await js.object_store(bucket)
    except BucketNotFoundError:
        return await js.create_object_store(bucket, ObjectStoreConfig(bucket=bucket, storage=StorageType.FILE, replicas=replicas))
    info = await js.stream_info(f"OBJ_{bucket}")
    if info.config.num_replicas < replicas:
        await js.update_stream(dataclasses.replace(info.config, num_replicas=replicas))
    return store


async def existing_bucket(js: JetStreamContext, bucket: str) -> ObjectStore:
    """A bucket its owning service created; `BucketNotFoundError` when it has not yet. Looking it
    up is a JetStream call like any other: it rides out a failover of the bus (a checkpoint save
    that began while one server of three died once failed its session on this lookup's timeout)."""
    return await through_failover(lambda: js.object_store(bucket), f"opening bucket {bucket}")
