"""An embedded cluster: nats-server, orchestrator, dataset service, PNodes (and the monitor) as
processes on this machine, for `computeall run`, the tests and the benchmarks."""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager
from pathlib import Path
from typing import AsyncIterator

from .client import Client, connect
from .nats_server import EmbeddedNats
from .supervisor import Supervisor, default_services


@asynccontextmanager
async def running_cluster(
    directory: Path, pnodes: int, with_monitor: bool = False, processes_on_machine: int | None = None
) -> AsyncIterator[tuple[Client, Supervisor]]:
    """Everything started, a client connected; stopped in order (and NATS last) on the way out.
    `processes_on_machine`: the PNodes take the thread count of that many PNodes on this machine."""
    server = EmbeddedNats(directory / "nats").start()
    supervisor = Supervisor(directory, server.url, server.process.pid)
    supervisor.start(default_services(pnodes, with_monitor=with_monitor, processes_on_machine=processes_on_machine))
    watcher = asyncio.create_task(supervisor.watch())
    try:
        async with connect(server.url) as client:
            yield client, supervisor
    finally:
        watcher.cancel()
        supervisor.stop()
        server.stop()
