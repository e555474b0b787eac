"""What a process needs to connect to the bus as one identity.

Every connection is made as an identity: a role (which service, a PNode, a user, the operator)
and a name, the identity's token in subjects (`ca.hb.<pnode>`, `ca.cmd.<user>.session.<sid>`).
The server knows the identity by its nkey (an Ed25519 key pair; the server config holds the public
key and that role's permissions), so the name a client uses in a subject is checked by the server,
never taken from a message field. Replies come to the identity's own inbox prefix
(`_INBOX.<role>.<name>`), which no other identity may subscribe to.

A credential is a small JSON file (mode 0600) or the `nats` object `computeall user create --json`
prints; an invite token (`computeall pnode --join-file TOKEN_FILE`) carries one inside.
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
import ssl
from pathlib import Path
from typing import Any, Literal, get_args

import nkeys
from pydantic import BaseModel, ConfigDict, Field, model_validator

from .subjects import INBOX_ROOT

Role = Literal["orchestrator", "dataset", "monitor", "pnode", "leaf", "server", "user", "admin", "authority", "superuser"]

NAME_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"  # one subject token: no dots, spaces or wildcards
LOCAL_USER = "local"  # the user a client on the machine of `computeall up` acts as unless told otherwise


def inbox_owner(reply: str | None) -> str | None:
    """Whose inbox a reply subject is (`role:name`), by its prefix `_INBOX.<role>.<name>.` (`Credential.
    inbox_prefix`), which only that identity may subscribe to; None for a subject that is no such inbox."""
    tokens = (reply or "").split(".")
    if len(tokens) < 4 or f"{tokens[0]}." != INBOX_ROOT or tokens[1] not in get_args(Role) or not re.match(
            NAME_PATTERN, tokens[2]):
        return None
    return f"{tokens[1]}:{tokens[2]}"


class CredentialError(ValueError):
    """A credential that cannot be used; the message says why and what to do."""


def new_nkey_seed() -> str:
    """A fresh user nkey seed (`SU...`): the private half of an identity."""
    return nkeys.encode_seed(secrets.token_bytes(32), nkeys.PREFIX_BYTE_USER).decode()


def nkey_public(seed: str) -> str:
    """The public key (`U...`) of a seed: what the server config lists."""
    pair = nkeys.from_seed(bytearray(seed.encode()))
    try:
        return pair.public_key.decode()
    finally:
        pair.wipe()


# -- API keys: a user's one secret -----------------------------------------------------------
API_KEY_PREFIX = "ca"


def new_api_key(user: str) -> str:
    """`ca.<user>.<256 random bits>`: it logs into the dashboard and, through the nkey derived from
    it, authenticates the user's NATS connections. The user's name is in it so a client knows the
    subjects it may use from the key alone."""
    return f"{API_KEY_PREFIX}.{user}.{secrets.token_urlsafe(32)}"


def api_key_user(api_key: str) -> str:
    prefix, user, secret = (api_key.split(".") + ["", ""])[:3] if api_key.count(".") == 2 else ("", "", "")
    if prefix != API_KEY_PREFIX or not secret or not re.match(NAME_PATTERN, user):
        raise CredentialError("this API key cannot connect to NATS (it is not a `ca.<user>.<secret>` key); "
                              "make a new one with `computeall user create NAME` or on the dashboard")
    return user


def api_key_seed(api_key: str) -> str:
    """The user nkey seed derived from an API key (the key has 256 bits: the seed is as strong)."""
    raw = hashlib.sha256(b"computeall api key -> nkey v1\0" + api_key.encode()).digest()
    return nkeys.encode_seed(raw, nkeys.PREFIX_BYTE_USER).decode()


def ca_fingerprint(ca_pem: str) -> str:
    """SHA-256 of the CA certificate (DER), hex: what an invite pins."""
    return hashlib.sha256(ssl.PEM_cert_to_DER_cert(ca_pem)).hexdigest()


class TlsTrust(BaseModel):
    """The one CA a client trusts for this deployment, pinned by its fingerprint."""

    model_config = ConfigDict(extra="forbid")

    ca_pem: str
    ca_sha256: str = Field(..., pattern=r"^[0-9a-f]{64}$")
    server_name: str = Field(..., description="the name in the server certificate, checked instead of the address dialled")

    @model_validator(mode="after")
    def _pinned(self) -> "TlsTrust":
        try:
            actual = ca_fingerprint(self.ca_pem)
        except ValueError:
            raise ValueError("ca_pem is not a PEM certificate") from None
        if actual != self.ca_sha256:
            raise ValueError(f"the CA certificate's fingerprint is {actual}, not the pinned {self.ca_sha256}")
        return self

    def context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cadata=self.ca_pem)


class Credential(BaseModel):
    model_config = ConfigDict(extra="forbid")

    role: Role
    name: str = Field(..., pattern=NAME_PATTERN)
    servers: list[str] = Field(default_factory=list, description="nats:// or tls:// URLs")
    nkey_seed: str | None = Field(None, description="the identity's nkey seed (S...); None: anonymous")
    tls: TlsTrust | None = None

    @property
    def inbox_prefix(self) -> str:
        return f"{INBOX_ROOT}{self.role}.{self.name}"

    @property
    def identity(self) -> str:
        return f"{self.role}:{self.name}"

    @classmethod
    def for_api_key(cls, api_key: str, servers: list[str], tls: "TlsTrust | None" = None) -> "Credential":
        return cls(role="user", name=api_key_user(api_key), servers=servers, nkey_seed=api_key_seed(api_key), tls=tls)

    def at(self, servers: str | list[str] | None) -> "Credential":
        """The same identity, connecting to other servers (`--nats URL` overrides the file's)."""
        if not servers:
            return self
        if isinstance(servers, str):  # one URL, or a cluster's URLs comma-separated (as cluster.json holds them)
            servers = [url.strip() for url in servers.split(",") if url.strip()]
        return self.model_copy(update={"servers": list(servers)})

    def nats_options(self) -> dict[str, Any]:
        """Keyword arguments for `nats.connect` (the one place they are spelled)."""
        if not self.servers:
            raise CredentialError(f"the credential of {self.identity} names no server; pass --nats URL")
        options: dict[str, Any] = {"servers": self.servers, "inbox_prefix": self.inbox_prefix}
        if self.nkey_seed:
            options["nkeys_seed_str"] = self.nkey_seed
        if self.tls:
            options["tls"] = self.tls.context()
            options["tls_hostname"] = self.tls.server_name
        return options

    def client_object(self) -> dict[str, Any]:
        """What a plain nats-py client needs, as JSON (see docs/protocol.md for the example)."""
        out: dict[str, Any] = {"servers": self.servers, "inbox_prefix": self.inbox_prefix}
        if self.nkey_seed:
            out["nkeys_seed_str"] = self.nkey_seed
        if self.tls:
            out["tls_ca_pem"] = self.tls.ca_pem
            out["tls_hostname"] = self.tls.server_name
        return out

    # -- files ------------------------------------------------------------------------------
    def save(self, path: Path) -> Path:
        """Write as JSON readable by the owner only (mode 0600), atomically."""
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(self.model_dump_json(indent=2, exclude_none=True))
        tmp.replace(path)
        return path

    @classmethod
    def load(cls, path: str | Path) -> "Credential":
        """From a file, or from the JSON itself (how a container gets it, in an environment variable)."""
        if isinstance(path, str) and path.lstrip().startswith("{"):
            try:
                return cls.model_validate_json(path)
            except ValueError as exc:
                raise CredentialError(f"the credential given inline is not a computeall credential: {exc}") from None
        path = Path(path)
        try:
            return cls.model_validate_json(path.read_bytes())
        except OSError as exc:
            raise CredentialError(f"cannot read the credential {path}: {exc.strerror}") from None
        except ValueError as exc:
            raise CredentialError(f"{path} is not a computeall credential: {exc}") from None
