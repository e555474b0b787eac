"""Invite tokens: how another machine joins a deployment as a PNode (`computeall pnode --join TOKEN`).

`computeall invite pnode` makes one on the machine that runs `computeall up --public`: the NATS
URLs to dial, the deployment's CA (and its SHA-256 fingerprint, which the joiner pins: a CA that
does not match is refused), and a PNode credential, an nkey seed only this token holds, under a
name the server knows. The server accepts the seed's public key until the invite expires or is
revoked (`computeall invite revoke ID`), and then closes the PNode's connections.

A token is `ca-invite-1.` + base64url(JSON); treat it as a password.
"""

from __future__ import annotations

import base64
import binascii
import time

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .credentials import NAME_PATTERN, Credential, TlsTrust

TOKEN_PREFIX = "ca-invite-1."


class InviteError(ValueError):
    """A token that cannot be used; the message says why and what to do."""


class Invite(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str = Field(..., description="the invite's id: `computeall invite list|revoke ID`")
    name: str = Field(..., pattern=NAME_PATTERN, description="the PNode's name, which its subjects carry")
    servers: list[str] = Field(..., min_length=1)
    nkey_seed: str
    tls: TlsTrust
    expires: float | None = None
    memory: str | None = Field(None, description="the memory the PNode offers, unless `--memory` says otherwise")

    def token(self) -> str:
        return TOKEN_PREFIX + base64.urlsafe_b64encode(self.model_dump_json(exclude_none=True).encode()).decode().rstrip("=")

    @classmethod
    def from_token(cls, token: str, now: float | None = None) -> "Invite":
        token = token.strip()
        if not token.startswith(TOKEN_PREFIX):
            raise InviteError(f"not an invite token (it starts with {TOKEN_PREFIX!r}); make one with `computeall invite pnode`")
        body = token[len(TOKEN_PREFIX):]
        try:
            invite = cls.model_validate_json(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
        except (binascii.Error, ValueError, ValidationError) as exc:
            reason = "; ".join(e["msg"] for e in exc.errors()[:3]) if isinstance(exc, ValidationError) else str(exc)
            raise InviteError(f"the invite token is damaged ({reason}); copy it again, whole") from None
        if invite.expires is not None and invite.expires <= (time.time() if now is None else now):
            when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(invite.expires))
            raise InviteError(f"this invite expired at {when}; ask for a new one (`computeall invite pnode`)")
        return invite

    def credential(self) -> Credential:
        return Credential(role="pnode", name=self.name, servers=self.servers, nkey_seed=self.nkey_seed, tls=self.tls)
