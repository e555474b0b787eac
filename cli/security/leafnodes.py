"""The `leafnodes` blocks of a hub and of a remote site's leaf server (`ConfigSection`s).

A remote site runs its own nats-server (`computeall up --leaf-file TOKEN_FILE`): its PNodes connect to
it over their LAN, and only the leaf link to the hub crosses the WAN. The hub listens for leaf
connections with the same TLS certificate as for clients (`LeafListen`); the leaf dials it with
its own nkey (a `leaf` member of the hub, allowed only as a leaf-node connection, whose
permissions bound what crosses) and trusts only the deployment's CA (`LeafRemote`).

JetStream stays on the hub: the leaf server runs none. nats-server denies the plain JetStream API
(`$JS.API.>`) across every leaf link whose two sides are not one extended JetStream, so the hub
names its JetStream domain (`HUB_DOMAIN`, only when it accepts leaf nodes) and the leaf server maps
its PNodes' `$JS.API.` requests to that domain's `$JS.hub.API.` (`HubJetStream`), which the hub maps
back: the site's PNodes reach the checkpoint and upload buckets on the hub unchanged. The hub's
leaf block has no `authorization` of its own: its users could carry no permissions, so a leaf's
credential is an nkey user of the main one (allowed only as a leaf node), and a link without a
credential is refused like a client without one (tests/integration/test_leaf_link.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .server_config import ServerSettings

LEAF_PORT = 7422  # nats-server's customary leaf-node port
HUB_DOMAIN = "hub"  # the hub's JetStream domain, as remote sites address it
JS_API = "$JS.API."
HUB_JS_API = f"$JS.{HUB_DOMAIN}.API."


@dataclass(frozen=True)
class LeafListen:
    """The hub's listener for remote sites' leaf servers, with TLS (the server's certificate)."""

    host: str
    port: int

    key = "leafnodes"

    def block(self, settings: "ServerSettings") -> dict[str, Any]:
        if settings.tls is None:
            raise ValueError("leaf nodes cross other networks: the hub listens for them with TLS only")
        tls = {"cert_file": settings.tls.cert_file, "key_file": settings.tls.key_file, "timeout": 5}
        return {"host": self.host, "port": self.port, "tls": tls}


@dataclass(frozen=True)
class LeafRemote:
    """A site's leaf server dialling the hub: `urls` (tls://HOST:PORT), its nkey seed, the CA file it trusts."""

    urls: tuple[str, ...]
    nkey_seed: str
    ca_file: str
    reconnect: str = "2s"  # between tries of the link

    key = "leafnodes"

    def block(self, settings: "ServerSettings") -> dict[str, Any]:
        remote = {"urls": list(self.urls), "nkey": self.nkey_seed, "tls": {"ca_file": self.ca_file, "timeout": 5}}
        return {"remotes": [remote], "reconnect": self.reconnect}


@dataclass(frozen=True)
class HubJetStream:
    """A site's leaf server: its clients' JetStream API requests go to the hub's domain."""

    key = "mappings"

    def block(self, settings: "ServerSettings") -> dict[str, Any]:
        return {f"{JS_API}>": f"{HUB_JS_API}>"}
