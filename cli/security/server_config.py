"""The nats-server configuration of a deployment, generated: listen address, JetStream, limits,
TLS, and `authorization` with one user per active member (its public nkey, its role's
permissions, and how it may connect: as a client, or a `leaf` only as a leaf node). `computeall up`, the embedded test servers and docker-compose.yml all come from
`server_config`. A cluster (routes to peer servers) or leaf nodes extend it with a `ConfigSection`
each, passed in `ServerSettings.sections` (and `EmbeddedNats(sections=...)`): one more block of the
same generated file, never a second generator.

Every value is written as JSON, which the nats-server config format accepts, so a subject such as
`$JS.API.>` is a quoted string and never read as a variable reference.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Protocol

from computeall.protocol.subjects import Subjects

from .members import Member
from .roles import Permissions, leaf, permissions
from .session_grants import SessionGrants

# 8 MiB: a micro-batch's activations travel in a few chunks
MAX_PAYLOAD = 8 * 1024 * 1024


@dataclass(frozen=True)
class TlsFiles:
    cert_file: str
    key_file: str


class ConfigSection(Protocol):
    """A top-level block beyond one server's basics (`cluster`, `leafnodes`, ...): its key and its
    value, which may use the server's settings (its TLS files for a route's or leaf's listener)."""

    key: str

    def block(self, settings: "ServerSettings") -> dict[str, Any] | str: ...


@dataclass(frozen=True)
class Setting:
    """One plain top-level value (`server_name`, `http`)."""

    key: str
    value: str

    def block(self, settings: "ServerSettings") -> str:
        return self.value


ROUTE_USER = "route"
SYSTEM_ACCOUNT = "SYS"


@dataclass(frozen=True)
class ClusterSettings:
    """One server's place in a cluster of nats-servers: its route listener and the others' routes.
    Routes authenticate with the deployment's route secret: no one joins the cluster without it. Between
    machines (`ca_file` set) they also speak mutual TLS: each end presents the server certificate the
    deployment's CA made and accepts only one that CA made, so a server never invited cannot route here
    even with the secret, nor read a route's traffic."""

    name: str  # the cluster's
    server_name: str  # this server's, unique in the cluster (JetStream's RAFT peers go by it)
    host: str
    port: int
    routes: tuple[str, ...]  # nats-route://HOST:PORT of the other servers
    secret: str
    health_port: int  # nats-server's monitoring endpoint on `host`: /healthz says when JetStream is ready
    advertise: str | None = None  # HOST:PORT the other servers dial (a route listener on 0.0.0.0 names one address)
    ca_file: str | None = None  # the deployment's CA: routes speak mutual TLS with the server's certificate
    monitor_host: str | None = None  # where the monitoring endpoint listens, when not `host` (loopback)

    key = "cluster"

    def route_urls(self) -> list[str]:
        return [url.replace("nats-route://", f"nats-route://{ROUTE_USER}:{self.secret}@", 1) for url in self.routes]

    def block(self, settings: "ServerSettings") -> dict[str, Any]:
        block: dict[str, Any] = {"name": self.name, "host": self.host, "port": self.port}
        if self.advertise:
            block["advertise"] = self.advertise
        block.update({"routes": self.route_urls(),
                      "authorization": {"user": ROUTE_USER, "password": self.secret, "timeout": 5}})
        if self.ca_file:
            if settings.tls is None:
                raise ValueError("routes between machines speak TLS: the server needs its certificate")
            block["tls"] = {"cert_file": settings.tls.cert_file, "key_file": settings.tls.key_file,
                            "ca_file": self.ca_file, "verify": True, "timeout": 5}
        return block

    def sections(self) -> tuple[ConfigSection, ...]:
        """The blocks a clustered server adds: its name, its health endpoint, its routes."""
        return (Setting("server_name", self.server_name),
                Setting("http", f"{self.monitor_host or self.host}:{self.health_port}"), self)


@dataclass(frozen=True)
class ServerSettings:
    host: str
    port: int
    store_dir: str | None  # JetStream's; None: no JetStream (a remote site's leaf server, which uses the hub's)
    jetstream_domain: str | None = None  # set where remote sites reach this JetStream across a leaf link
    system_user: str | None = None  # the public nkey of the system account's one user (the authority's, on a hub)
    max_payload: int = MAX_PAYLOAD
    tls: TlsFiles | None = None
    authorization: bool = True  # False: anyone may connect (only a server nobody else can reach)
    sections: tuple[ConfigSection, ...] = ()


def server_config(settings: ServerSettings, users: list[tuple[str, Permissions]]) -> str:
    """The config text; `users` are (public nkey, its permissions), see `member_users`."""
    config: dict[str, Any] = {"host": settings.host, "port": settings.port, "max_payload": settings.max_payload}
    if settings.store_dir is not None:
        domain = {"domain": settings.jetstream_domain} if settings.jetstream_domain else {}
        config["jetstream"] = {"store_dir": settings.store_dir, **domain}
    if settings.tls:
        config["tls"] = {"cert_file": settings.tls.cert_file, "key_file": settings.tls.key_file, "timeout": 5}
    if settings.authorization:
        config["authorization"] = {"users": [
            {"nkey": nkey, "permissions": permission_block(p), "allowed_connection_types": [p.connection]}
            for nkey, p in users
        ]}
    if settings.system_user:
        config["accounts"] = {SYSTEM_ACCOUNT: {"users": [{"nkey": settings.system_user}]}}
        config["system_account"] = SYSTEM_ACCOUNT
    for section in settings.sections:
        if section.key in config:
            raise ValueError(f"the server config has a `{section.key}` block already; a section adds a new one")
        config[section.key] = section.block(settings)
    return "".join(f"{key}: {json.dumps(value, indent=2)}\n" for key, value in config.items())


def member_users(members: list[Member], subjects: Subjects, grants: SessionGrants) -> list[tuple[str, Permissions]]:
    """The active `members` as users of this server, with the checkpoint buckets `grants` give them. A leaf
    may carry what its site's PNodes may do; those PNodes connect to their leaf server, never to this one.
    The lists of the roles that read users' uploads buckets name every user."""
    users = [m.name for m in members if m.role == "user"]

    def of(m: Member) -> Permissions:
        if m.role == "leaf":
            site = [p.name for p in members if p.site == m.name and p.role == "pnode"]
            return leaf(m.name, subjects, site, {p: grants.reach("pnode", p) for p in site})
        return permissions(m.role, m.name, subjects, grants.reach(m.role, m.name), users)

    return [(m.public_key, of(m)) for m in members if m.site is None]


def permission_block(p: Permissions) -> dict[str, Any]:
    """nats-server reads an empty allow-list as "anything": nothing allowed is written as a deny of all."""
    block = {verb: {"allow": list(allowed)} if allowed else {"deny": [">"]}
             for verb, allowed in (("publish", p.publish), ("subscribe", p.subscribe))}
    if p.publish_deny:
        block["publish"]["deny"] = list(p.publish_deny)
    return block
