"""An embedded cluster: nats-server, orchestrator, dataset service, PNodes (and the monitor) as
processes on this machine, for `computeall run`, the tests and the benchmarks."""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager
from pathlib import Path
from typing import AsyncIterator

import nats.errors

from computeall.protocol.fair_share import FairShareLimits, limit_argv
from computeall.protocol.faults import FaultSpec
from computeall.protocol.dataset_client import list_datasets
from computeall.protocol.session_reads import list_sessions

from .client import Client, connect
from .nats_cluster import NatsCluster
from .security.authority import Authority
from .supervisor import Supervisor, default_services


@asynccontextmanager
async def running_cluster(
    directory: Path, pnodes: int, with_monitor: bool = False, processes_on_machine: int | None = None,
    pnode_memory: str | None = None, listen: str | None = None, faults: dict[str, FaultSpec] | None = None,
    nats_servers: int = 1, limits: FairShareLimits = FairShareLimits(),
) -> AsyncIterator[tuple[Client, Supervisor]]:
    """Everything started, a client connected as the local user once the services have set up the
    event log; stopped in order (and NATS last) on the way out. `processes_on_machine`: how many
    PNodes' worth of threads to divide the cores by (default `pnodes`); `pnode_memory` (e.g.
    "2GiB"): what each PNode offers (default: its share of the RAM). `listen` ("HOST:PORT") serves
    NATS there with TLS, as `up --listen` does, and every process connects over it. `faults`
    (PNode name -> fault) makes those PNodes return wrong results: a testing option. `nats_servers` 3:
    a clustered bus (`NatsCluster`). `limits`: the orchestrator's per-user limits."""
    server = NatsCluster(directory, nats_servers, listen=listen).start()
    supervisor = Supervisor(directory, server.url, server)
    services = default_services(pnodes, with_monitor=with_monitor, processes_on_machine=processes_on_machine,
                                pnode_memory=pnode_memory, orchestrator_args=limit_argv(limits))
    faults = faults or {}
    supervisor.start([s.with_arg("--fault", str(faults[s.name])) if s.name in faults else s for s in services])
    tasks = [asyncio.create_task(supervisor.watch()), asyncio.create_task(Authority(server).run())]
    try:
        async with connect(server.credential("user")) as client:
            await wait_for_services(client)
            supervisor.announce()
            yield client, supervisor
    finally:
        for task in tasks:
            task.cancel()
        supervisor.stop()
        server.stop()


async def wait_for_services(client: Client, timeout_s: float = 60.0) -> None:
    """Until an orchestrator and a dataset service answer the client's reads: by then the orchestrator
    has set up the event log (only services set up streams), and a dataset request made next finds
    someone listening (under load the dataset service came up after the orchestrator)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    reads = {
        "orchestrator": lambda: list_sessions(client.nc, client.subjects, client.user, timeout=5.0, patience_s=0.0),
        "dataset service": lambda: list_datasets(client.nc, client.subjects, client.user, timeout=5.0),
    }
    for service, read in reads.items():
        while True:
            try:
                await read()
                break
            except (nats.errors.NoRespondersError, nats.errors.TimeoutError):
                if loop.time() > deadline:
                    raise TimeoutError(f"no {service} answered within {timeout_s:.0f}s; see the logs") from None
                await asyncio.sleep(0.1)
