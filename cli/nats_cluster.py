"""The deployment's bus on this machine: one nats-server, or several clustered over routes.

`NatsCluster(directory, size)` starts `size` `EmbeddedNats` processes. With one, it is the plain
server it always was (store in `<dir>/nats`). With three, each server routes to the other two
(authenticated by the deployment's route secret), JetStream runs its RAFT groups over them, and
the services keep CA_LOG, CA_TEL and the Object Store buckets at 3 replicas (`bus.replicas`):
any one server can die, lose its disk even, and nothing committed is lost. A deployment started
with one server moves to three by starting again with `--nats-cluster 3`: the first start of the
cluster copies every stream of the single server's store into it (`bus_migration`).

Every credential it issues names every server's URL: clients connect to any and reconnect to
another when theirs goes away. Its identities are issued once and every server reloads them.

Its servers share one machine: it survives a crashed process, not a lost machine. A bus whose servers
each run on a machine of their own is `bus_machine.py`'s.
"""

from __future__ import annotations

import time
import urllib.request
from pathlib import Path

from computeall.protocol.credentials import Credential, Role

from .bus_migration import move_single_server_streams, single_server_store
from .cluster_file import ServiceStatus
from .nats_server import EmbeddedNats, free_port
from .security.deployment import Security
from .security.server_config import ClusterSettings

CLUSTER_NAME = "computeall"


class NatsCluster:
    def __init__(self, directory: Path, size: int = 1, security: Security | None = None, listen: str | None = None,
                 leaf_listen: str | None = None) -> None:
        """`listen` ("HOST:PORT"): a single server open to other machines, with TLS (`EmbeddedNats`);
        `leaf_listen` ("HOST:PORT"): it accepts remote sites' leaf servers there."""
        if size < 1:
            raise ValueError(f"a bus needs at least one nats-server, not {size}")
        if listen and size > 1:
            raise ValueError("a cluster of nats-servers on one machine listens on localhost only; across machines, "
                             "one server per machine: `up --public --nats-cluster 3` (`bus_machine.py`)")
        clustered = sorted(p.name for p in (directory / "nats-cluster").glob("nats-*"))
        if clustered and len(clustered) != size:
            raise ValueError(f"the bus of {directory} is a cluster of {len(clustered)} nats-servers (its streams live on "
                             f"them); start it with --nats-cluster {len(clustered)}")
        self.directory = directory
        self.security = security or Security(directory / "security")
        ports = [free_port() for _ in range(size)]
        urls = [f"nats://127.0.0.1:{port}" for port in ports]
        routes = [f"nats-route://127.0.0.1:{free_port()}" for _ in range(size)]
        self.servers = []
        self.health_ports: list[int | None] = []
        for i in range(size):
            cluster = None
            if size > 1:
                cluster = ClusterSettings(
                    name=CLUSTER_NAME, server_name=f"nats-{i}", host="127.0.0.1", port=int(routes[i].rsplit(":", 1)[1]),
                    routes=tuple(r for j, r in enumerate(routes) if j != i), secret=self.security.route_secret(),
                    health_port=free_port(),
                )
            self.health_ports.append(cluster.health_port if cluster else None)
            store = directory / "nats" if size == 1 else directory / "nats-cluster" / f"nats-{i}"
            self.servers.append(EmbeddedNats(store, port=ports[i], security=self.security, urls=urls if cluster else None,
                                             sections=cluster.sections() if cluster else (), listen=listen,
                                             leaf_listen=leaf_listen))

    # -- addresses and identities --------------------------------------------------------------
    @property
    def urls(self) -> list[str]:
        return [server.url for server in self.servers]

    def public_urls(self) -> list[str]:
        """How other machines dial the bus (only a single server listening beyond loopback)."""
        return self.servers[0].public_urls()

    def public_leaf_urls(self) -> list[str]:
        """How remote sites' leaf servers dial the bus (`computeall invite leaf`)."""
        return self.servers[0].public_leaf_urls()

    @property
    def url(self) -> str:
        """Every server's URL, comma-separated: what cluster.json and `--nats` carry."""
        return ",".join(self.urls)

    def credential(self, role: Role, name: str | None = None) -> Credential:
        credential = self.servers[0].credential(role, name)
        self.apply_members()
        return credential

    def credential_file(self, role: Role, name: str | None = None, memory: str | None = None) -> Path:
        path = self.servers[0].credential_file(role, name, memory)
        self.apply_members()
        return path

    def credential_files(self, role: Role, names: list[str]) -> list[Path]:
        paths = self.servers[0].credential_files(role, names)
        self.apply_members()
        return paths

    def local_api_key_file(self) -> Path:
        return self.servers[0].local_api_key_file()

    def apply_members(self) -> None:
        for server in self.servers:
            server.apply_members()

    def statuses(self) -> list[ServiceStatus]:
        """Each nats-server as a service of kind `nats`, with its pid and URL."""
        return [
            ServiceStatus(name=f"nats-{i}" if len(self.servers) > 1 else "nats", kind="nats", url=server.url,
                          pid=server.process.pid if server.process else None,
                          state="running" if server.process and server.process.poll() is None else "stopped")
            for i, server in enumerate(self.servers)
        ]

    # -- lifetime ---------------------------------------------------------------------------------
    def start(self, timeout_s: float = 60.0) -> "NatsCluster":
        try:
            for server in self.servers:
                server.start()
            if len(self.servers) > 1:
                self._jetstream_ready(timeout_s)
                if single_server_store(self.directory):
                    move_single_server_streams(self.directory, self)
        except BaseException:
            self.stop()
            raise
        return self

    def restart(self, index: int) -> None:
        """Start server `index` again (after it died): same port, store and routes, so it rejoins;
        returns once every server is healthy again."""
        self.servers[index].stop()
        self.servers[index].start()
        self._jetstream_ready(60.0)

    def revive(self) -> list[str]:
        """Start again every server of a cluster that died (it rejoins and catches up by itself); their URLs."""
        dead = [s for s in self.servers if len(self.servers) > 1 and s.process is not None and s.process.poll() is not None]
        for server in dead:
            server.stop()
            server.start()
        return [s.url for s in dead]

    def stop(self) -> None:
        for server in reversed(self.servers):
            server.stop()

    def _jetstream_ready(self, timeout_s: float) -> None:
        """Until every server says it is healthy: routes up, a JetStream meta leader, its streams current."""
        deadline = time.monotonic() + timeout_s
        for server, port in zip(self.servers, self.health_ports):
            url = f"http://127.0.0.1:{port}/healthz"
            while True:
                try:
                    with urllib.request.urlopen(url, timeout=2.0) as reply:
                        if reply.status == 200:
                            break
                except OSError as exc:  # 503 while JetStream is not ready, refused while starting
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"nats-server {server.url} was not healthy within {timeout_s:.0f}s ({exc}); "
                                           f"see {server.log_file}") from None
                time.sleep(0.2)

    def __enter__(self) -> "NatsCluster":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

