"""Invite tokens: how another machine joins a deployment, as a PNode (`computeall pnode --join-file
TOKEN_FILE`) or as a remote site's leaf server with its PNodes (`computeall up --leaf-file TOKEN_FILE`);
a token is never passed on a command line (`secret_args`).

`computeall invite pnode` makes one on the machine that runs `computeall up --public`: the NATS
URLs to dial, the deployment's CA (and its SHA-256 fingerprint, which the joiner pins: a CA that
does not match is refused), and a PNode credential, an nkey seed only this token holds, under a
name the server knows. The server accepts the seed's public key until the invite expires or is
revoked (`computeall invite revoke ID`), and then closes the PNode's connections.

A leaf invite (`computeall invite leaf`) holds the hub's leaf-node URLs, the same CA, the leaf's own
credential (a `leaf` identity: the server accepts it only on a leaf-node connection) and one
credential per PNode of the site (`pnodes`): the site's leaf server admits exactly those PNodes,
and the hub lets across the leaf link only what they may do (docs/security.md, "Remote sites").

A server invite (`computeall invite server`) lets another machine run one of the bus's clustered
nats-servers (`computeall up --join-bus-file TOKEN_FILE`): the client URLs and route URLs of the bus's
servers, the same CA, and a one-identity credential (a `server` member) that may only ask an
authority for the deployment's server kit (`cli/security/bus_join.py`) while the invite is active.

A token is `ca-invite-1.` + base64url(JSON); treat it as a password. It names the role it admits
(`Invitable`); `from_token(token, expect=ROLE)` refuses one made for another role.
"""

from __future__ import annotations

import base64
import binascii
import time

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from .credentials import NAME_PATTERN, Credential, TlsTrust

TOKEN_PREFIX = "ca-invite-1."
Invitable = Literal["pnode", "leaf", "server"]  # the roles another machine may be invited as
_MAKE = {"pnode": "computeall invite pnode", "leaf": "computeall invite leaf", "server": "computeall invite server"}


class InviteError(ValueError):
    """A token that cannot be used; the message says why and what to do."""


class SitePNode(BaseModel):
    """A PNode of a leaf's site: its name and the nkey seed it connects to the site's leaf server with."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(..., pattern=NAME_PATTERN)
    nkey_seed: str

    def credential(self, servers: list[str]) -> Credential:
        return Credential(role="pnode", name=self.name, servers=servers, nkey_seed=self.nkey_seed)


class Invite(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str = Field(..., description="the invite's id: `computeall invite list|revoke ID`")
    role: Invitable = "pnode"
    name: str = Field(..., pattern=NAME_PATTERN, description="the member's name, which its subjects carry")
    servers: list[str] = Field(..., min_length=1)
    nkey_seed: str
    tls: TlsTrust
    expires: float | None = None
    memory: str | None = Field(None, description="the memory the PNode offers, unless `--memory` says otherwise; "
                                                 "the server's record of the invite caps any offer at it")
    pnodes: list[SitePNode] = Field(default_factory=list, description="a leaf's: the PNodes its site may run")
    routes: list[str] = Field(default_factory=list, description="a server's: the route URLs (nats-route://HOST:PORT) "
                                                               "of the bus's servers, which it joins")

    @model_validator(mode="after")
    def _site(self) -> "Invite":
        if (self.role == "leaf") != bool(self.pnodes):
            raise ValueError("a leaf invite names its site's PNodes, and only a leaf invite does")
        if (self.role == "server") != bool(self.routes):
            raise ValueError("a server invite names the bus's routes, and only a server invite does")
        return self

    def token(self) -> str:
        return TOKEN_PREFIX + base64.urlsafe_b64encode(self.model_dump_json(exclude_none=True).encode()).decode().rstrip("=")

    @classmethod
    def from_token(cls, token: str, now: float | None = None, expect: Invitable | None = None) -> "Invite":
        token = token.strip()
        if not token.startswith(TOKEN_PREFIX):
            raise InviteError(f"not an invite token (it starts with {TOKEN_PREFIX!r}); make one with "
                              f"`{_MAKE[expect or 'pnode']}` on the machine that runs `computeall up --public`")
        body = token[len(TOKEN_PREFIX):]
        try:
            invite = cls.model_validate_json(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
        except (binascii.Error, ValueError, ValidationError) as exc:
            reason = "; ".join(e["msg"] for e in exc.errors()[:3]) if isinstance(exc, ValidationError) else str(exc)
            raise InviteError(f"the invite token is damaged ({reason}); copy it again, whole") from None
        if invite.expires is not None and invite.expires <= (time.time() if now is None else now):
            when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(invite.expires))
            raise InviteError(f"this invite expired at {when}; ask for a new one (`{_MAKE[invite.role]}`)")
        if expect is not None and invite.role != expect:
            raise InviteError(f"this invite admits a {invite.role}, not a {expect}; make one with `{_MAKE[expect]}`")
        return invite

    def credential(self) -> Credential:
        return Credential(role=self.role, name=self.name, servers=self.servers, nkey_seed=self.nkey_seed, tls=self.tls)
