"""Opening a bucket is JetStream calls like any other: while the bus fails over they get no answer, and
the open is tried again instead of failing what asked for it. A re-placement's `open_bucket` that met a
stream leader's election once failed its session as an internal error (tests/integration/test_nats_cluster.py)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import nats.errors
from nats.js.api import StreamConfig
from nats.js.errors import BucketNotFoundError

from computeall.protocol.object_store import open_bucket


class FailingOverJetStream:
    """A bucket OBJ_b at one replica; its first `failures` stream lookups get no answer."""

    def __init__(self, failures: int, exists: bool = True) -> None:
        self.failures = failures
        self.exists = exists
        self.calls: list[str] = []
        self.config = StreamConfig(name="OBJ_b", num_replicas=1)

    async def object_store(self, bucket: str):
        self.calls.append("object_store")
        if not self.exists:
            raise BucketNotFoundError()
        return f"store {bucket}"

    async def create_object_store(self, bucket: str, config):
        self.calls.append("create")
        self.exists = True
        return f"store {bucket}"

    async def stream_info(self, name: str):
        self.calls.append("stream_info")
        if self.failures:
            self.failures -= 1
            raise nats.errors.TimeoutError()
        return SimpleNamespace(config=self.config)

    async def update_stream(self, config):
        self.calls.append("update")
        self.config = config


def test_an_open_that_meets_a_leader_election_is_tried_again():
    js = FailingOverJetStream(failures=2)
    assert asyncio.run(open_bucket(js, "b", replicas=3)) == "store b"
    assert js.calls.count("stream_info") == 3, "asked again after each unanswered lookup"
    assert js.config.num_replicas == 3, "raised to the bus's replicas once the stream answered"


def test_a_bucket_that_is_not_there_is_made():
    js = FailingOverJetStream(failures=0, exists=False)
    assert asyncio.run(open_bucket(js, "b")) == "store b"
    assert js.calls == ["object_store", "create"]
