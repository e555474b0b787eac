"""A remote site: `computeall up --leaf-file TOKEN_FILE` runs a leaf nats-server and the site's PNodes.

The site's PNodes connect to the leaf server on this machine; the leaf server keeps one link to
the hub (the deployment's nats-server, `up --public` or `--leaf-listen`), authenticated by the
leaf's credential and checked against the deployment's CA, both from the invite. The leaf server
admits exactly the PNodes the invite named, by the keys it carries, and runs no JetStream: the
event log and the buckets stay on the hub, reached across the link.
"""

from __future__ import annotations

import time
from pathlib import Path

from computeall.protocol.credentials import nkey_public
from computeall.protocol.invites import Invite

from .nats_server import EmbeddedNats, free_port
from .security.deployment import Security
from .security.leafnodes import HubJetStream, LeafRemote
from .security.members import Member
from .security.roles import Permissions, on_site
from .security.server_config import Setting
from .security.session_grants import EVERY_SESSION, SessionGrants


class LeafServer(EmbeddedNats):
    """The site's nats-server, on 127.0.0.1: the site's PNodes as its members, a leaf link to the hub."""

    ALWAYS_ADMITTED = ()  # nobody but the site's PNodes: no operator, no user on a site
    JETSTREAM = False  # the hub's, across the link
    status_name = "nats-leaf"

    def __init__(self, directory: Path, invite: Invite, port: int | None = None) -> None:
        security = Security(directory / "security")
        ca_file = security.directory / "hub-ca.pem"
        ca_file.parent.mkdir(parents=True, exist_ok=True)
        ca_file.write_text(invite.tls.ca_pem)  # pinned: the invite checked it against its fingerprint
        self.monitor_port = free_port()  # /leafz says when the link is up, /connz who is connected
        sections = (Setting("server_name", f"leaf-{invite.name}"), Setting("http", f"127.0.0.1:{self.monitor_port}"),
                    LeafRemote(tuple(invite.servers), invite.nkey_seed, str(ca_file)), HubJetStream())
        super().__init__(directory / "nats-leaf", port=port, security=security, sections=sections)
        self.invite = invite
        self._admit_site()

    def _admit_site(self) -> None:
        """The invite's PNodes are this server's members (the invite is the whole truth, at every start)."""
        with self.security.members.edit() as members:
            members.members = [Member(role="pnode", name=p.name, public_key=nkey_public(p.nkey_seed), source="invite")
                               for p in self.invite.pnodes]
        for p in self.invite.pnodes:
            p.credential([self.url]).save(self.security.credential_path("pnode", p.name))

    def users(self) -> list[tuple[str, Permissions]]:
        return [(key, on_site(p)) for key, p in super().users()]

    def session_grants(self) -> SessionGrants:
        """Every bucket: this server cannot follow placement, and the hub's side of the link grants
        only the sessions the site's PNodes host."""
        return EVERY_SESSION

    @property
    def monitoring_url(self) -> str:
        return f"http://127.0.0.1:{self.monitor_port}"

    def wait_linked(self, timeout_s: float = 30.0) -> None:
        """Until the leaf link to the hub is up; RuntimeError (with the end of the log) when it is not."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                if self.monitoring("leafz").get("leafs"):
                    return
            except OSError:
                pass  # the monitoring port opens a moment after the client port
            time.sleep(0.2)
        tail = self.log_file.read_text(errors="replace").splitlines()[-5:] if self.log_file.exists() else []
        raise RuntimeError(f"the leaf server could not join the hub at {', '.join(self.invite.servers)} within "
                           f"{timeout_s:.0f}s (revoked or expired invite, or the hub unreachable); its log "
                           f"{self.log_file} ends:\n  " + "\n  ".join(tail))


def site_pnodes(invite: Invite, wanted: int | None) -> list[str]:
    """The names of the PNodes to run: the invite's first `wanted` (default all)."""
    names = [p.name for p in invite.pnodes]
    if wanted is not None and not 0 <= wanted <= len(names):
        raise ValueError(f"this site's invite names {len(names)} PNodes ({', '.join(names)}); --pnodes {wanted} is more")
    return names[:wanted] if wanted is not None else names
