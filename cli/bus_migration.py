"""Moving a deployment's bus from one nats-server to a cluster, keeping everything it recorded.

A single server's JetStream store cannot simply join a cluster: the cluster's metadata knows
nothing of its streams and would start new, empty ones. So the first start of a cluster on a data
dir that holds a single server's store copies every stream across with JetStream's own snapshot
and restore: the event log, the telemetry, the checkpoint, dataset and upload buckets, with their
sequence numbers and their durable consumers' positions intact (sessions resume where they were,
the monitor's projection stays valid), each at the cluster's replica count. The old store is then
renamed `jetstream.moved-to-cluster`, kept until its owner deletes it.

The old server runs only for the copy, on a free localhost port, with no authorization (nothing
else can reach it); the copy into the cluster acts as a one-time `superuser` identity, revoked
when the copy is done.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from nats.aio.client import Client as NATS
from nats.errors import NoRespondersError

from computeall.protocol import bus
from computeall.protocol.credentials import Credential

from .nats_server import EmbeddedNats

if TYPE_CHECKING:
    from .nats_cluster import NatsCluster

log = logging.getLogger("computeall.bus_migration")

MIGRATOR = "bus-migration"
CHUNK_BYTES = 256 * 1024
MOVED = "jetstream.moved-to-cluster"
INTEREST_WAIT_S = 10.0


class MigrationError(RuntimeError):
    pass


def single_server_store(directory: Path) -> Path | None:
    """The store a single server left in `directory`, when there is one with data to move."""
    store = directory / "nats" / "jetstream"
    return store if store.is_dir() and any(store.iterdir()) else None


def move_single_server_streams(directory: Path, cluster: "NatsCluster") -> list[str]:
    """Copy every stream of the single server's store into the running `cluster`; the names moved.
    Runs on a thread of its own, so a caller on an event loop may call it too."""
    result: dict = {}

    def run() -> None:
        try:
            result["moved"] = asyncio.run(_move(directory, cluster))
        except BaseException as exc:  # handed to the caller's thread
            result["error"] = exc

    thread = threading.Thread(target=run, name="bus-migration")
    thread.start()
    thread.join()
    if "error" in result:
        raise result["error"]
    return result["moved"]


async def _move(directory: Path, cluster: "NatsCluster") -> list[str]:
    old = EmbeddedNats(directory / "nats", security=cluster.security, authorization=False).start()
    migrator = cluster.credential("superuser", MIGRATOR)
    moved = []
    try:
        src = await bus.connect(Credential(role="superuser", name=MIGRATOR, servers=[old.url]), name="computeall-bus-migration-source")
        dst = await bus.connect(migrator, name="computeall-bus-migration")
        try:
            for info in await src.jetstream().streams_info():
                name = info.config.name
                await _copy(src, dst, name, bus.replicas(dst))
                moved.append(name)
                log.info("moved stream %s (%d messages) into the cluster", name, info.state.messages)
        finally:
            await src.close()
            await dst.close()
    finally:
        old.stop()
        _revoke(cluster)
        for role in ("admin", "user"):  # starting the old server wrote its URL into these: the cluster's again
            cluster.credential(role)
    store = directory / "nats" / "jetstream"
    store.rename(store.with_name(f"{MOVED}-{int(time.time())}"))
    return moved


async def _copy(src: NATS, dst: NATS, stream: str, replicas: int) -> None:
    """One stream: snapshot from `src` (answering each chunk's flow control), restore into `dst`."""
    inbox = src.new_inbox()
    chunks: list[bytes] = []
    done = asyncio.Event()

    async def on_chunk(msg) -> None:
        if not msg.data:
            done.set()
            return
        chunks.append(msg.data)
        if msg.reply:
            await src.publish(msg.reply, b"")

    sub = await src.subscribe(inbox, cb=on_chunk)
    request = {"deliver_subject": inbox, "chunk_size": CHUNK_BYTES}
    snapshot = _answer(await src.request(f"$JS.API.STREAM.SNAPSHOT.{stream}", json.dumps(request).encode(), timeout=30))
    await asyncio.wait_for(done.wait(), 600)
    await sub.unsubscribe()

    config = {**snapshot["config"], "num_replicas": replicas}
    restore = {"config": config, "state": snapshot["state"]}
    started = _answer(await dst.request(f"$JS.API.STREAM.RESTORE.{stream}", json.dumps(restore).encode(), timeout=30))
    for chunk in chunks:
        await _send_chunk(dst, started["deliver_subject"], chunk, timeout=30)
    _answer(await _send_chunk(dst, started["deliver_subject"], b"", timeout=120))


async def _send_chunk(dst: NATS, subject: str, chunk: bytes, timeout: float):
    """One restore chunk. The server that answered the restore request may not be the one `dst`
    is connected to, and its interest in the chunks' subject reaches the others a moment later:
    until then a chunk finds no responder (and nobody received it, so sending it again is safe)."""
    deadline = time.monotonic() + INTEREST_WAIT_S
    while True:
        try:
            return await dst.request(subject, chunk, timeout=timeout)
        except NoRespondersError:
            if time.monotonic() > deadline:
                raise MigrationError(f"the cluster never listened for the restore's chunks on {subject} (waited {INTEREST_WAIT_S:.0f} s)") from None
            await asyncio.sleep(0.05)


def _answer(msg) -> dict:
    reply = json.loads(msg.data)
    if reply.get("error"):
        raise MigrationError(f"moving the streams into the cluster failed: {reply['error'].get('description', reply['error'])}")
    return reply


def _revoke(cluster: "NatsCluster") -> None:
    with cluster.security.members.edit() as members:
        for member in members.members:
            if member.role == "superuser" and member.name == MIGRATOR and member.revoked is None:
                member.revoked = time.time()
    cluster.apply_members()
