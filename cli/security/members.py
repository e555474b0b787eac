"""The identities a deployment's NATS server accepts: `security/members.json`.

Every identity is a public nkey with its role and name; the private half lives only with its
holder (a credential file, an invite token, a user's API key). Editing happens under an exclusive
file lock (`LockedJson`), so `computeall invite` and a running `computeall up` never lose each
other's changes.
"""

from __future__ import annotations

import fcntl
import os
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from computeall.protocol.credentials import NAME_PATTERN, Role
from computeall.protocol.membership_api import DEFAULT_PNODE_MEMORY
from computeall.protocol.sizes import parse_size

Source = Literal["local", "invite", "api-key"]
M = TypeVar("M", bound=BaseModel)


class Member(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str = Field(default_factory=lambda: uuid.uuid4().hex[:10])
    role: Role
    name: str = Field(..., pattern=NAME_PATTERN)
    public_key: str = Field(..., pattern=r"^U[A-Z2-7]{55}$")
    source: Source
    created: float = Field(default_factory=time.time)
    expires: float | None = None
    revoked: float | None = None
    updated: float | None = None  # when the record last changed after `created` (its `memory`): copies merge by it
    memory: str | None = None  # the most a PNode may offer (an invite's --memory, what `up` gave its own)
    site: str | None = None  # a PNode of a remote site: the leaf it reaches this server through, and only it

    def active(self, now: float | None = None) -> bool:
        now = time.time() if now is None else now
        return self.revoked is None and (self.expires is None or now < self.expires)


class Members(BaseModel):
    model_config = ConfigDict(extra="forbid")

    members: list[Member] = Field(default_factory=list)

    def active(self, now: float | None = None) -> list[Member]:
        return [m for m in self.members if m.active(now)]

    def by_key(self, public_key: str) -> Member | None:
        return next((m for m in self.members if m.public_key == public_key), None)

    def site(self, leaf: str, now: float | None = None) -> list[Member]:
        """The active PNodes of `leaf`'s site."""
        return [m for m in self.active(now) if m.site == leaf]

    def pnode_memory(self, pnode: str, now: float | None = None) -> int:
        """The most PNode `pnode` may offer: its record's cap, `DEFAULT_PNODE_MEMORY` where it names
        none. The server cannot say which of a name's credentials connected, so the smallest counts."""
        return min((parse_size(m.memory) if m.memory else DEFAULT_PNODE_MEMORY
                    for m in self.active(now) if m.role == "pnode" and m.name == pnode), default=DEFAULT_PNODE_MEMORY)

    def find(self, member_id: str) -> Member | None:
        return next((m for m in self.members if m.id == member_id), None)

    def next_expiry(self, now: float | None = None) -> float | None:
        """When the next active member expires (the server config must change then)."""
        now = time.time() if now is None else now
        return min((m.expires for m in self.active(now) if m.expires is not None), default=None)


class LockedJson(Generic[M]):
    """One pydantic model in a JSON file (mode 0600) that several processes edit: `edit` is exclusive
    against every other editor, and a reader never sees half a file."""

    def __init__(self, path: Path, model: type[M]) -> None:
        self.path = path
        self.model = model
        self.lock_path = path.with_name(path.name + ".lock")

    def read(self) -> M:
        if not self.path.exists():
            return self.model()
        return self.model.model_validate_json(self.path.read_bytes())

    @contextmanager
    def edit(self) -> Iterator[M]:
        """Read, let the caller change, write back; exclusive against every other editor."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.lock_path, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            value = self.read()
            yield value
            tmp = self.path.with_name(self.path.name + ".tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as out:
                out.write(value.model_dump_json(indent=2, exclude_none=True))
            tmp.replace(self.path)


class MemberStore(LockedJson[Members]):
    def __init__(self, path: Path) -> None:
        super().__init__(path, Members)
