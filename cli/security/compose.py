"""docker-compose.yml, generated: the services `computeall up --pnodes 3` runs, each with its own
identity, and the nats-server configuration from the same generator as `up`'s.

Two profiles hold the bus: `single`, one nats-server (`up`), and `cluster`, three clustered over
routes (`up --nats-cluster 3`: the same `ClusterSettings`, so the same config blocks; the services
see three URLs and keep their streams at 3 replicas). The `.env` picks one (`COMPOSE_PROFILES`) and
gives the services its URLs (`CA_NATS`).

The file holds no secret: every public nkey is a `${CA_NKEY_<NAME>}`, every credential a
`${CA_CREDENTIAL_<NAME>}` and the route secret `${CA_ROUTE_SECRET}`, which
`computeall compose-env [--nats-cluster 3] > .env` fills in (keeping the identities in the data dir,
so the CLI on the host connects with the local user's and operator's credentials). Any other `$`
(JetStream's `$JS.API...` subjects) is written `$$`, which compose reads as a plain `$`.
`python tools/compose_file.py` rewrites docker-compose.yml; a test fails when it is stale.
"""

from __future__ import annotations

import json
import re

import yaml

from computeall.protocol.credentials import Role
from computeall.protocol.subjects import Subjects

from ..nats_cluster import CLUSTER_NAME
from ..supervisor import default_services
from .deployment import LOCAL_USER, OPERATOR, Security
from .roles import permissions
from .server_config import ClusterSettings, ServerSettings, server_config
from .session_grants import EVERY_SESSION

PNODES = 3
CLUSTER = 3  # the nats-servers of the `cluster` profile
NATS_IMAGE = "nats:2.11"
CLIENT_PORT, ROUTE_PORT, HEALTH_PORT = 4222, 6222, 8222
NEEDS_ENV = "run computeall compose-env > .env"


def servers(cluster: bool) -> list[str]:
    """The bus's nats-server services in a profile."""
    return [f"nats-{i}" for i in range(CLUSTER)] if cluster else ["nats"]


def container_urls(cluster: bool) -> list[str]:
    """How the services reach NATS on the compose network."""
    return [f"nats://{name}:{CLIENT_PORT}" for name in servers(cluster)]


def host_urls(cluster: bool) -> list[str]:
    """How the CLI on the host does: each server's port is published, 4222 on."""
    return [f"nats://127.0.0.1:{CLIENT_PORT + i}" for i in range(len(servers(cluster)))]


def identities() -> list[tuple[Role, str]]:
    """Every identity of the compose deployment: its services and the host's user and operator."""
    return [(s.kind, s.name) for s in default_services(PNODES)] + [("user", LOCAL_USER), ("admin", OPERATOR)]


def variable(kind: str, name: str) -> str:
    return f"CA_{kind}_{re.sub(r'[^A-Za-z0-9]', '_', name).upper()}"


def cluster_settings(index: int) -> ClusterSettings:
    """Server `index` of the `cluster` profile, as `up --nats-cluster 3` places its own."""
    names = servers(cluster=True)
    return ClusterSettings(
        name=CLUSTER_NAME, server_name=names[index], host="0.0.0.0", port=ROUTE_PORT,
        routes=tuple(f"nats-route://{n}:{ROUTE_PORT}" for n in names if n != names[index]),
        secret="${CA_ROUTE_SECRET}", health_port=HEALTH_PORT,
    )


def nats_config(cluster_index: int | None = None) -> str:
    """The config of the single server, or of server `cluster_index` of the cluster."""
    sections = cluster_settings(cluster_index).sections() if cluster_index is not None else ()
    settings = ServerSettings(host="0.0.0.0", port=CLIENT_PORT, store_dir="/data", sections=sections)
    # no authority follows placement here: the orchestrator and the PNodes get every session's bucket
    names = [name for role, name in identities() if role == "user"]  # whose uploads the dataset service reads
    users = [(f"${{{variable('NKEY', name)}}}", permissions(role, name, Subjects(), EVERY_SESSION.reach(role, name), names))
             for role, name in identities()]
    return re.sub(r"\$(?!\{CA_)", "$$", server_config(settings, users))


def nats_service(name: str, profile: str, host_port: int) -> dict:
    return {
        "image": NATS_IMAGE,
        "profiles": [profile],
        "command": ["-c", "/etc/nats/nats.conf"],
        "configs": [{"source": f"{name}_conf", "target": "/etc/nats/nats.conf"}],
        "ports": [f"{host_port}:{CLIENT_PORT}"],
        "volumes": [f"{name}-data:/data"],
    }


def compose_file() -> str:
    services = {"nats": nats_service("nats", "single", CLIENT_PORT)}
    configs = {"nats_conf": {"content": nats_config()}}
    for i, name in enumerate(servers(cluster=True)):
        services[name] = nats_service(name, "cluster", CLIENT_PORT + i)
        configs[f"{name}_conf"] = {"content": nats_config(i)}
    # each service waits for the servers of the profile in use
    bus = {name: {"condition": "service_started", "required": False} for name in servers(False) + servers(True)}
    for spec in default_services(PNODES, monitor_port=8080):
        args = list(spec.args)
        if spec.kind == "monitor":
            args = ["--host", "0.0.0.0", *args]
        if spec.kind == "orchestrator":  # no authority here: the server's configuration grants every bucket
            args = [*args, "--storage-grants", "every"]
        service = {
            "build": ".",
            "command": [f"computeall.{spec.kind}", "--nats", f"${{CA_NATS:?{NEEDS_ENV}}}", "--data-dir",
                        f"/data/{spec.kind}", *args],
            "environment": {"COMPUTEALL_CREDENTIAL": f"${{{variable('CREDENTIAL', spec.name)}:?{NEEDS_ENV}}}"},
            "depends_on": bus,
            "restart": "unless-stopped",
        }
        if spec.kind in ("dataset", "monitor"):
            service["volumes"] = [f"{spec.kind}-data:/data"]
        if spec.kind == "monitor":
            service["ports"] = ["8080:8080"]
        services[spec.name] = service
    volumes = [f"{name}-data" for name in servers(False) + servers(True)] + ["dataset-data", "monitor-data"]
    document = {"services": services, "configs": configs, "volumes": dict.fromkeys(volumes)}
    header = ("# Generated by `python tools/compose_file.py` from computeall.cli.security.compose: do not edit.\n"
              "# The services of `computeall up --pnodes 3`, each with its own credential, on one nats-server\n"
              "# (profile `single`) or three clustered ones (`cluster`, as `up --nats-cluster 3`); run\n"
              "# `computeall compose-env [--nats-cluster 3] > .env` once before `docker compose up`.\n")
    # a dict shared between services (`depends_on`) would become a YAML anchor and aliases: write each out
    dumper = type("Dumper", (yaml.SafeDumper,), {"ignore_aliases": lambda self, data: True})
    return header + yaml.dump(document, Dumper=dumper, sort_keys=False, width=120)


def compose_env(security: Security, nats_cluster: int = 1) -> str:
    """The `.env` for docker compose: the bus's profile and URLs, the route secret (compose reads the
    whole file, the other profile's servers too), and each identity's public nkey and credential
    (kept in `security`)."""
    if nats_cluster not in (1, CLUSTER):
        raise ValueError(f"docker-compose.yml runs 1 or {CLUSTER} nats-servers, not {nats_cluster}")
    cluster = nats_cluster > 1
    lines = [f"COMPOSE_PROFILES={'cluster' if cluster else 'single'}", f"CA_NATS={','.join(container_urls(cluster))}",
             f"CA_ROUTE_SECRET={security.route_secret()}"]
    for role, name in identities():
        inside = role not in ("user", "admin")  # the host's user and operator connect from outside
        credential = security.issue(role, name, container_urls(cluster) if inside else host_urls(cluster))
        lines.append(f"{variable('NKEY', name)}={security.public_key(role, name)}")
        if inside:
            inline = json.dumps(credential.model_dump(exclude_none=True), separators=(",", ":"))
            lines.append(f"{variable('CREDENTIAL', name)}='{inline}'")
    return "\n".join(lines) + "\n"
