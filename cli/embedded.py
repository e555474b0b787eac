"""An embedded cluster: nats-server, orchestrator, dataset service, PNodes (and the monitor) as
processes on this machine, for `computeall run`, the tests and the benchmarks."""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager
from pathlib import Path
from typing import AsyncIterator

from nats.js.errors import NotFoundError

from computeall.protocol.subjects import LOG_STREAM

from .client import Client, connect
from .nats_cluster import NatsCluster
from .supervisor import Supervisor, default_services


@asynccontextmanager
async def running_cluster(
    directory: Path, pnodes: int, with_monitor: bool = False, processes_on_machine: int | None = None,
    nats_servers: int = 1,
) -> AsyncIterator[tuple[Client, Supervisor]]:
    """Everything started, a client connected as the local user once the services have set up the
    event log; stopped in order (and NATS last) on the way out. `processes_on_machine`: how many
    PNodes' worth of threads to divide the cores by (default `pnodes`). `nats_servers` 3: a clustered bus."""
    server = NatsCluster(directory, nats_servers).start()
    supervisor = Supervisor(directory, server.url, server)
    supervisor.start(default_services(pnodes, with_monitor=with_monitor, processes_on_machine=processes_on_machine))
    watcher = asyncio.create_task(supervisor.watch())
    try:
        async with connect(server.credential("user")) as client:
            await wait_for_event_log(client)
            supervisor.announce()
            yield client, supervisor
    finally:
        watcher.cancel()
        supervisor.stop()
        server.stop()


async def wait_for_event_log(client: Client, timeout_s: float = 60.0) -> None:
    """Until a service has created the event log's stream (only services set up streams)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        try:
            await client.js.stream_info(LOG_STREAM)
            return
        except NotFoundError:
            if loop.time() > deadline:
                raise TimeoutError(f"no service created the {LOG_STREAM} stream within {timeout_s:.0f}s; see the logs") from None
            await asyncio.sleep(0.1)
