"""Invitations: PNode members made for another machine, or a remote site's leaf with its PNodes;
listed, revoked (`computeall invite`).

They are edits of members.json on the machine that runs `computeall up`; its authority applies
each within a second (a reload), and `wait_applied` waits for that, so a token works as soon as it
is printed and a revoked PNode is cut off when `invite revoke` returns.
"""

from __future__ import annotations

import re
import time
import uuid
from pathlib import Path

from computeall.protocol.credentials import TlsTrust, new_nkey_seed, nkey_public
from computeall.protocol.invites import Invitable, Invite, SitePNode
from computeall.protocol.sizes import parse_size

from .deployment import Security
from .members import Member

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smhd]?)$")
_UNIT_S = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


class InvitationError(ValueError):
    """What the operator is told; the message says what to do."""


def parse_duration(text: str) -> float:
    """`90`, `30m`, `24h`, `7d` -> seconds."""
    match = _DURATION.match(text.strip())
    if not match or float(match.group(1)) <= 0:
        raise InvitationError(f"--expires {text!r} is not a duration: use e.g. 30m, 24h or 7d")
    return float(match.group(1)) * _UNIT_S[match.group(2)]


def invite(security: Security, role: Invitable, servers: list[str], tls: TlsTrust, name: str | None = None,
           expires_in_s: float | None = None, memory: str | None = None, site_pnodes: int = 0,
           routes: list[str] = ()) -> Invite:
    """A new member of `role` that only the returned token's holder can connect as. A leaf's site gets
    `site_pnodes` PNodes (`<leaf>-0`, ...), members that reach this server only through that leaf. A server
    is told the bus's `routes`, and its member may only ask for the server kit (`bus_join.py`)."""
    if (role == "leaf") != (site_pnodes > 0):
        raise InvitationError("a leaf invite names at least one PNode of its site (--pnodes N), and only a leaf invite")
    if memory is not None:
        try:
            parse_size(memory)
        except ValueError as exc:
            raise InvitationError(f"--memory: {exc}") from None
    invite_id = uuid.uuid4().hex[:10]
    name = name or f"{role}-{invite_id[:6]}"
    seed = new_nkey_seed()
    expires = time.time() + expires_in_s if expires_in_s else None
    site = [SitePNode(name=f"{name}-{i}", nkey_seed=new_nkey_seed()) for i in range(site_pnodes)]
    with security.members.edit() as members:
        for wanted_role, wanted in [(role, name), *(("pnode", p.name) for p in site)]:
            if any(m.role == wanted_role and m.name == wanted for m in members.active()):
                raise InvitationError(f"a {wanted_role} named {wanted} is already a member; choose another --name")
        members.members.append(Member(id=invite_id, role=role, name=name, public_key=nkey_public(seed),
                                      source="invite", expires=expires, memory=memory))
        members.members += [Member(role="pnode", name=p.name, public_key=nkey_public(p.nkey_seed), source="invite",
                                   expires=expires, site=name) for p in site]
    return Invite(id=invite_id, role=role, name=name, servers=servers, nkey_seed=seed, tls=tls, expires=expires,
                  memory=memory, pnodes=site, routes=list(routes))


def invitations(security: Security) -> list[Member]:
    return [m for m in security.members.read().members if m.source == "invite"]


def revoke(security: Security, invite_id: str) -> Member:
    """Revoke an invitation; a leaf's takes its site's PNodes with it."""
    with security.members.edit() as members:
        member = members.find(invite_id)
        if member is None or member.source != "invite":
            raise InvitationError(f"no invitation {invite_id}; `computeall invite list` shows them")
        site = members.site(member.name) if member.role == "leaf" else []
        for m in [member, *site]:
            if m.revoked is None:
                m.revoked = time.time()
    return member


def state(member: Member, now: float | None = None) -> str:
    now = time.time() if now is None else now
    if member.revoked is not None:
        return "revoked"
    return "expired" if member.expires is not None and member.expires <= now else "active"


def wait_applied(config_file: Path, public_key: str, present: bool, timeout_s: float = 15.0) -> bool:
    """Until the running server's configuration lists the key (or no longer does); False on timeout."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if config_file.exists() and (public_key in config_file.read_text()) == present:
            return True
        time.sleep(0.1)
    return False
