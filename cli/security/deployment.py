"""One deployment's security material in its data dir (`<data dir>/security/`).

    members.json              the identities the server accepts (public keys only)
    route.secret              what the deployment's nats-servers present on their routes (mode 0600)
    system.seed               the authority's key in a hub's system account, to close leaf links (mode 0600)
    session-grants.json       which PNodes host each session: they reach its checkpoint bucket (`session_grants`)
    credentials/<role>/<name>.json   local identities' credentials (mode 0600): services, the
                              PNodes `up` starts, the local user, the operator
    local-api-key             the local user's API key (mode 0600): the dashboard login, and the
                              seed of the local user's nkey

`Security.issue` hands out a local identity's credential, creating it on first use and reusing
it afterwards (a restarted service keeps its identity; a revoked one stays revoked).
"""

from __future__ import annotations

import os
import secrets
import time
from pathlib import Path

from computeall.protocol.credentials import (
    LOCAL_USER,
    Credential,
    CredentialError,
    Role,
    TlsTrust,
    api_key_seed,
    new_api_key,
    new_nkey_seed,
    nkey_public,
)
from computeall.protocol.subjects import Subjects

from .members import LockedJson, Member, MemberStore
from .session_grants import SessionGrants

OPERATOR = "operator"  # the admin identity of the machine that runs `computeall up`


class Security:
    def __init__(self, directory: Path, subjects: Subjects | None = None) -> None:
        self.directory = directory
        self.subjects = subjects or Subjects()  # the deployment's subject prefix: what permissions name
        self.members = MemberStore(directory / "members.json")
        self.grants = LockedJson(directory / "session-grants.json", SessionGrants)

    def route_secret(self) -> str:
        """The password the deployment's nats-servers present to each other on their routes."""
        return self._secret("route.secret", lambda: secrets.token_urlsafe(32))

    def install_route_secret(self, secret: str) -> None:
        """The bus's route secret, from the kit an invited server gets (`bus_join.py`)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        tmp = self.directory / "route.secret.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(secret)
        tmp.replace(self.directory / "route.secret")

    def system_seed(self) -> str:
        """The nkey seed of the authority's user in a hub's system account: it closes leaf links
        (nats-server keeps a leaf link's credential and permissions across reloads)."""
        return self._secret("system.seed", new_nkey_seed)

    def _secret(self, name: str, make) -> str:
        path = self.directory / name
        if not path.exists():
            self.directory.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as out:
                out.write(make())
        return path.read_text().strip()

    def credential_path(self, role: Role, name: str) -> Path:
        return self.directory / "credentials" / role / f"{name}.json"

    def issue(self, role: Role, name: str, servers: list[str], tls: TlsTrust | None = None,
              memory: str | None = None) -> Credential:
        """The credential of the local identity `role`/`name` at `servers`, written to its file; a PNode's
        `memory`, when given, is the most it may offer (its record's cap, as an invite's)."""
        path = self.credential_path(role, name)
        local_user = (role, name) == ("user", LOCAL_USER)
        seed = api_key_seed(self.local_api_key()) if local_user else _existing_seed(path)
        with self.members.edit() as members:
            known = members.by_key(nkey_public(seed)) if seed else None
            if known is None or (known.role, known.name) != (role, name):
                seed = seed if local_user else new_nkey_seed()
                known = Member(role=role, name=name, public_key=nkey_public(seed), source="local")
                members.members.append(known)
            if memory is not None and known.memory != memory:
                known.memory, known.updated = memory, time.time()
        credential = Credential(role=role, name=name, servers=servers, nkey_seed=seed, tls=tls)
        credential.save(path)
        return credential

    @property
    def local_api_key_path(self) -> Path:
        return self.directory / "local-api-key"

    def local_api_key(self) -> str:
        """The local user's API key, made on first use; only this file (mode 0600) holds it."""
        path = self.local_api_key_path
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(path.name + ".tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as out:
                out.write(new_api_key(LOCAL_USER) + "\n")
            tmp.replace(path)
        return path.read_text().strip()

    def public_key(self, role: Role, name: str) -> str:
        credential = self.local(role, name)
        if credential is None or not credential.nkey_seed:
            raise CredentialError(f"no credential of {role} {name} in {self.directory}")
        return nkey_public(credential.nkey_seed)

    def local(self, role: Role, name: str) -> Credential | None:
        """A local identity's credential as last issued, or None when there is none."""
        path = self.credential_path(role, name)
        return Credential.load(path) if path.exists() else None


def _existing_seed(path: Path) -> str | None:
    if not path.exists():
        return None
    try:
        return Credential.load(path).nkey_seed
    except CredentialError:
        return None  # unreadable: a new identity replaces it
