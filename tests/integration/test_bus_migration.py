"""A deployment started with one nats-server moves to three: `up --nats-cluster 3` on the same data
dir copies every stream (events with their sequence numbers, checkpoint objects, durable consumers'
positions) into the cluster at 3 replicas."""

import pytest

from computeall.cli.bus_migration import MIGRATOR, single_server_store
from computeall.cli.nats_cluster import NatsCluster
from computeall.protocol import bus
from computeall.protocol.eventlog import ensure_streams
from computeall.protocol.object_store import dataset_bucket, open_bucket
from computeall.protocol.subjects import LOG_STREAM, Subjects

BUCKET = dataset_bucket(Subjects())


async def test_a_single_server_deployment_moves_to_three(tmp_path):
    subjects = Subjects()
    with NatsCluster(tmp_path, 1) as single:
        nc = await bus.connect(single.credential("orchestrator"), name="test-before")
        js = nc.jetstream()
        await ensure_streams(js, subjects, replicas=bus.replicas(nc))
        acks = [await js.publish(subjects.pnode_evt(f"p{i}", "PNodeJoined"), f"event {i}".encode()) for i in range(5)]
        await js.pull_subscribe(subjects.pnode_evt("p0", "PNodeJoined"), durable="kept", stream=LOG_STREAM)
        await nc.close()
        datasets = await bus.connect(single.credential("dataset"), name="test-before-bucket")  # a bucket it manages
        store = await open_bucket(datasets.jetstream(), BUCKET, bus.replicas(datasets))
        await store.put("d/tokenizer.json", b"\x01" * 300_000)
        await datasets.close()
    assert single_server_store(tmp_path)

    with NatsCluster(tmp_path, 3) as cluster:
        assert single_server_store(tmp_path) is None, "the old store is set aside once moved"
        nc = await bus.connect(cluster.credential("orchestrator"), name="test-after")
        js = nc.jetstream()
        info = await js.stream_info(LOG_STREAM)
        assert (info.config.num_replicas, info.state.messages, info.state.last_seq) == (3, 5, acks[-1].seq)
        assert (await js.get_msg(LOG_STREAM, acks[2].seq)).data == b"event 2"
        assert (await js.consumer_info(LOG_STREAM, "kept")).name == "kept"
        await nc.close()
        datasets = await bus.connect(cluster.credential("dataset"), name="test-after-bucket")
        djs = datasets.jetstream()
        assert (await (await djs.object_store(BUCKET)).get("d/tokenizer.json")).data == b"\x01" * 300_000
        assert (await djs.stream_info(f"OBJ_{BUCKET}")).config.num_replicas == 3
        await datasets.close()
        migrator = next(m for m in cluster.security.members.read().members if m.name == MIGRATOR)
        assert migrator.revoked is not None, "the one-time identity of the copy is revoked"
    with pytest.raises(ValueError, match="--nats-cluster 3"):
        NatsCluster(tmp_path, 1)  # its streams live on the three now
