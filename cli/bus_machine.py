"""This machine's nats-server in a bus of three that spans machines.

    machine A$ computeall up --public --nats-cluster 3          # waits for two more servers
    machine A$ computeall invite server --name b --json          # a token, once per machine
    machine B$ computeall up --join-bus-file TOKEN_FILE [--pnodes N]

Each machine runs one server (`MachineServer`), listening beyond loopback with TLS for clients (the
deployment's certificate, as `up --public` always did), for remote sites' leaf servers, and for routes
to the other servers: mutual TLS with certificates of the deployment's CA, plus the route secret
(`server_config.ClusterSettings`). Its routes are every server of the roster (`bus_state.BusServers`,
which every machine's authority merges), itself included: nats-server skips a route to itself, and a
JetStream cluster needs routes configured before its first peer arrives. Every stream and bucket keeps
3 replicas, one per machine, so any one machine may be lost (docs/operations.md, "Losing a machine").

Its JetStream domain is the hub's (`leafnodes.HUB_DOMAIN`) on every server, since each accepts leaf
links and the domain must be the cluster's. The processes of a machine dial its own server (their
credentials name it only) and learn the others from it, to fail over to them.

A machine remembers the name of its server (`<data dir>/security/server-name`): started again, with
`up --public --nats-cluster 3`, it is the same server, with its store and routes.
"""

from __future__ import annotations

import re
import socket
import time
from pathlib import Path

from pydantic import BaseModel

from .nats_cluster import CLUSTER_NAME
from .nats_server import EmbeddedNats, _host_port, free_port, machine_addresses, monitoring
from .security.bus_state import BusServer, BusServers, LocalState
from .security.deployment import Security
from .security.leafnodes import LEAF_PORT
from .security.server_config import ConfigSection, ClusterSettings

ROUTE_PORT = 6222  # nats-server's customary route port
SERVERS = 3  # a bus spanning machines: three servers, every stream at three replicas
SERVER_NAME_FILE = "server-name"


def this_server(security: Security) -> str | None:
    """The name of the server this data dir's machine runs in a bus spanning machines, if it runs one."""
    path = security.directory / SERVER_NAME_FILE
    return path.read_text().strip() if path.exists() else None


def host_server_name() -> str:
    """A default name for the first machine's server: its host name, as a subject token."""
    return re.sub(r"[^A-Za-z0-9_-]", "-", socket.gethostname())[:64] or "nats"


class MachineServer(EmbeddedNats):
    def __init__(self, directory: Path, name: str, listen: str, leaf_listen: str | None = None,
                 route_listen: str | None = None, advertise: str | None = None,
                 security: Security | None = None) -> None:
        """`listen` ("HOST:PORT"): where clients dial it (TLS); `leaf_listen`: remote sites' leaf servers
        (default: the same host, port 7422); `route_listen`: the other servers (default: port 6222);
        `advertise`: the address the other servers dial (default: the listen host, or this machine's
        first address when that is 0.0.0.0)."""
        security = security or Security(directory / "security")
        host, _ = _host_port(listen, 4222)
        super().__init__(directory / "nats", security=security, listen=listen,
                         leaf_listen=leaf_listen or f"{host}:{LEAF_PORT}")
        self.name = name
        self.route_host, self.route_port = _host_port(route_listen or f"{host}:{ROUTE_PORT}", ROUTE_PORT)
        if advertise is None:
            wildcard = self.route_host in ("0.0.0.0", "")
            addresses = machine_addresses() if wildcard else [self.route_host]
            if not addresses:
                raise ValueError("this machine has no address other machines can reach; give --advertise HOST")
            advertise = addresses[0]
        self.advertise = advertise
        self.monitor_port = free_port()
        self.roster = LocalState(security)
        self.status_name = f"nats-{name}"
        (security.directory / SERVER_NAME_FILE).parent.mkdir(parents=True, exist_ok=True)
        (security.directory / SERVER_NAME_FILE).write_text(name + "\n")

    @property
    def monitoring_url(self) -> str:
        return f"http://127.0.0.1:{self.monitor_port}"

    @property
    def route_url(self) -> str:
        return f"nats-route://{self.advertise}:{self.route_port}"

    def record(self) -> BusServer:
        """This server, as the roster lists it."""
        return BusServer(name=self.name, machine=socket.gethostname(), route=self.route_url,
                         clients=self.public_urls(), leaves=self.public_leaf_urls())

    def certificate_names(self) -> list[str]:
        return list(dict.fromkeys([*super().certificate_names(), self.advertise]))

    def config_sections(self) -> tuple[ConfigSection, ...]:
        routes = sorted({*self.roster.servers.read().routes(), self.route_url})
        cluster = ClusterSettings(
            name=CLUSTER_NAME, server_name=self.name, host=self.route_host, port=self.route_port, routes=tuple(routes),
            secret=self.security.route_secret(), health_port=self.monitor_port,
            advertise=f"{self.advertise}:{self.route_port}", ca_file=str(self.tls.ca_file), monitor_host="127.0.0.1")
        return (*self.sections, *cluster.sections())

    def start(self, timeout: float = 10.0) -> "MachineServer":
        self.roster.record_server(self.record())
        super().start(timeout)
        return self

    # -- the cluster, as this server sees it -------------------------------------------------
    def live_servers(self) -> set[str]:
        """The servers this one routes to now, itself included."""
        try:
            routes = self.monitoring("routez").get("routes") or []
        except OSError:
            routes = []
        return {self.name} | {r["remote_name"] for r in routes if r.get("remote_name")}

    def wait_for_servers(self, count: int = SERVERS, timeout_s: float | None = None, stopped=lambda: False) -> None:
        """Until JetStream runs on `count` servers with a leader, and this one is healthy; RuntimeError
        after `timeout_s` (None: no limit, until `stopped()`)."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while not stopped():
            try:
                meta = self.monitoring("jsz").get("meta_cluster") or {}
                peers = 1 + len(meta.get("replicas") or [])  # a follower does not see the others' progress
                if meta.get("leader") and peers >= count and len(self.live_servers()) >= count \
                        and self.monitoring("healthz").get("status") == "ok":
                    return
            except OSError:
                pass  # starting, or 503 while JetStream recovers
            if deadline is not None and time.monotonic() > deadline:
                raise RuntimeError(f"the bus did not reach {count} servers within {timeout_s:.0f}s; see {self.log_file}")
            time.sleep(0.5)


class ServerStatus(BaseModel):
    """One server of the bus in `computeall status --json`."""

    name: str
    machine: str | None = None  # from the roster: the host it runs on
    route: str | None = None
    clients: list[str] = []
    up: bool  # routed to the asking server (or the asking server itself)
    meta_leader: bool = False  # leads JetStream's metadata (stream and consumer placement)
    leads: list[str] = []  # the streams (and buckets' streams) whose RAFT group it leads


def bus_status(monitoring_url: str, roster: BusServers) -> list[ServerStatus]:
    """Every server of the bus with its machine and what it leads, as the server whose monitoring endpoint
    is `monitoring_url` sees it; OSError when it does not answer."""
    jsz = monitoring(monitoring_url, "jsz?accounts=true&streams=true")
    meta = jsz.get("meta_cluster") or {}
    own = monitoring(monitoring_url, "varz").get("server_name")
    up = {own} | {r["remote_name"] for r in monitoring(monitoring_url, "routez").get("routes") or []}
    leads: dict[str, list[str]] = {}
    for account in jsz.get("account_details") or []:
        for stream in account.get("stream_detail") or []:
            leader = (stream.get("cluster") or {}).get("leader")
            if leader:
                leads.setdefault(leader, []).append(stream["name"])
    names = sorted({*up, *roster.servers, *(r["name"] for r in meta.get("replicas") or [])})
    return [ServerStatus(name=name, machine=getattr(roster.servers.get(name), "machine", None),
                         route=getattr(roster.servers.get(name), "route", None),
                         clients=getattr(roster.servers.get(name), "clients", []), up=name in up,
                         meta_leader=meta.get("leader") == name, leads=sorted(leads.get(name, [])))
            for name in names]
