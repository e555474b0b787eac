"""The JetStream Object Store buckets of a deployment (checkpoints, dataset shards)."""

from __future__ import annotations

from nats.js import JetStreamContext
from nats.js.errors import BucketNotFoundError
from nats.js.object_store import ObjectStore
from pydantic import BaseModel

from .subjects import Subjects


class CheckpointObject(BaseModel):
    """One VNode's safetensors object in a bucket, as a checkpoint (or uploaded weights) names it."""

    vnode: str
    object: str  # name in the bucket
    digest: str  # blake2b-128 of the object's bytes
    bytes: int


def checkpoint_bucket(subjects: Subjects) -> str:
    return f"{subjects.prefix}-checkpoints"


async def open_bucket(js: JetStreamContext, bucket: str) -> ObjectStore:
    """The bucket, created on first use (file storage: checkpoints survive a restart)."""
    try:
        return await js.object_store(bucket)
    except BucketNotFoundError:
        return await js.create_object_store(bucket)
