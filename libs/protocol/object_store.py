"""The JetStream Object Store buckets of a deployment (checkpoints, dataset shards)."""

from __future__ import annotations

from nats.js import JetStreamContext
from nats.js.errors import BucketNotFoundError
from nats.js.object_store import ObjectStore

from .subjects import Subjects


def checkpoint_bucket(subjects: Subjects) -> str:
    return f"{subjects.prefix}-checkpoints"


async def open_bucket(js: JetStreamContext, bucket: str) -> ObjectStore:
    """The bucket, created on first use (file storage: checkpoints survive a restart)."""
    try:
        return await js.object_store(bucket)
    except BucketNotFoundError:
        return await js.create_object_store(bucket)
