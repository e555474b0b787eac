"""A real embedded cluster for tests: nats-server, orchestrator, dataset service, PNodes as processes."""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager
from pathlib import Path
from typing import AsyncIterator

from computeall.cli.client import Client, connect
from computeall.cli.nats_server import EmbeddedNats
from computeall.cli.supervisor import Supervisor, default_services


@asynccontextmanager
async def running_cluster(directory: Path, pnodes: int, with_monitor: bool = False) -> AsyncIterator[tuple[Client, Supervisor]]:
    server = EmbeddedNats(directory / "nats").start()
    supervisor = Supervisor(directory, server.url, server.process.pid)
    supervisor.start(default_services(pnodes, with_monitor=with_monitor))
    watcher = asyncio.create_task(supervisor.watch())
    try:
        async with connect(server.url) as client:
            yield client, supervisor
    finally:
        watcher.cancel()
        supervisor.stop()
        server.stop()


def stdlib_corpus(max_bytes: int = 300_000) -> list[str]:
    from computeall.cli.default_corpus import stdlib_files

    return stdlib_files(max_bytes)


async def wait_for_pnodes(client: Client, names: list[str], timeout: float = 60.0) -> None:
    """Until every named PNode has sent a heartbeat (it starts in a few seconds: torch loads)."""
    seen: set[str] = set()
    done = asyncio.Event()

    async def on_beat(msg) -> None:
        seen.add(msg.subject.rsplit(".", 1)[-1])
        if seen >= set(names):
            done.set()

    sub = await client.nc.subscribe(client.subjects.heartbeat_all(), cb=on_beat)
    try:
        await asyncio.wait_for(done.wait(), timeout)
    finally:
        await sub.unsubscribe()
