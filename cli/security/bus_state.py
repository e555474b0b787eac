"""What every server of a bus spanning machines must agree on, and how the copies converge.

Each machine that runs one of the bus's servers keeps the deployment's security state in its own
data dir, as a machine with one server always did: the members (`members.json`), the session grants
(`session-grants.json`) and, new here, the bus's servers (`bus-servers.json`: each one's name,
machine, route and client addresses, written by its own authority). Its authority generates its
server's configuration from them. For the servers to admit the same identities with the same
permissions, the three are merged with the copy in a key-value bucket at 3 replicas
(`membership_api.security_bucket`), which survives any one machine, by every authority
(`bus_sync.py`).

The merge makes the copies converge whatever the order of the edits, because each part only grows:

- members, by id: a revocation is forever; otherwise the record changed last wins (`Member.updated`);
- session grants, by session: the placement at the latest log position wins, as on one machine;
- servers, by name: the record written last wins.

So two authorities that edit at once (an invite on one machine, a placement on another) lose neither
edit, and a machine that was down takes up the others' edits when it comes back.
"""

from __future__ import annotations

import time

from pydantic import BaseModel, ConfigDict, Field

from computeall.protocol.credentials import NAME_PATTERN

from .deployment import Security
from .members import LockedJson, Member, Members
from .session_grants import SessionGrant, SessionGrants


class BusServer(BaseModel):
    """One nats-server of the bus, as the authority of its machine recorded it."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(..., pattern=NAME_PATTERN, description="its server name (JetStream's RAFT peer)")
    machine: str = Field(..., description="the host name of the machine it runs on")
    route: str = Field(..., description="nats-route://HOST:PORT the other servers dial")
    clients: list[str] = Field(default_factory=list, description="tls://HOST:PORT other machines' clients dial")
    leaves: list[str] = Field(default_factory=list, description="tls://HOST:PORT remote sites' leaf servers dial")
    since: float = Field(default_factory=time.time, description="when the record was written: the later wins")


class BusServers(BaseModel):
    model_config = ConfigDict(extra="forbid")

    servers: dict[str, BusServer] = Field(default_factory=dict)

    def routes(self) -> list[str]:
        return sorted(s.route for s in self.servers.values())

    def clients(self) -> list[str]:
        return [url for s in sorted(self.servers.values(), key=lambda s: s.name) for url in s.clients]

    def leaves(self) -> list[str]:
        return [url for s in sorted(self.servers.values(), key=lambda s: s.name) for url in s.leaves]


class SharedState(BaseModel):
    """The three parts, as one value of the bucket (and of a joining server's kit)."""

    model_config = ConfigDict(extra="forbid")

    members: Members = Field(default_factory=Members)
    grants: SessionGrants = Field(default_factory=SessionGrants)
    servers: BusServers = Field(default_factory=BusServers)

    def merge(self, other: "SharedState") -> "SharedState":
        return SharedState(members=merge_members(self.members, other.members),
                           grants=merge_grants(self.grants, other.grants),
                           servers=merge_servers(self.servers, other.servers))


def _latest(a, b, rank):
    """The one of two versions of a record that wins, the same whichever is `a`: by `rank`, then by content."""
    return max(a, b, key=lambda v: (rank(v), v.model_dump_json()))


def merge_members(a: Members, b: Members) -> Members:
    by_id: dict[str, Member] = {}
    for member in [*a.members, *b.members]:
        known = by_id.get(member.id)
        by_id[member.id] = member if known is None else _latest(
            known, member, lambda m: (m.revoked is not None, m.updated or m.created))
    return Members(members=sorted(by_id.values(), key=lambda m: (m.created, m.id)))


def merge_grants(a: SessionGrants, b: SessionGrants) -> SessionGrants:
    sessions: dict[str, SessionGrant] = dict(a.sessions)
    for sid, grant in b.sessions.items():
        known = sessions.get(sid)
        sessions[sid] = grant if known is None else _latest(known, grant, lambda g: g.as_of)
    return SessionGrants(every=a.every or b.every, sessions=dict(sorted(sessions.items())))


def merge_servers(a: BusServers, b: BusServers) -> BusServers:
    servers = dict(a.servers)
    for name, record in b.servers.items():
        known = servers.get(name)
        servers[name] = record if known is None else _latest(known, record, lambda s: s.since)
    return BusServers(servers=dict(sorted(servers.items())))


class LocalState:
    """This machine's copy: the three files of its data dir, each edited under its own lock."""

    def __init__(self, security: Security) -> None:
        self.security = security
        self.servers = LockedJson(security.directory / "bus-servers.json", BusServers)

    def read(self) -> SharedState:
        return SharedState(members=self.security.members.read(), grants=self.security.grants.read(),
                           servers=self.servers.read())

    def absorb(self, other: SharedState) -> bool:
        """Merge `other` into the files (with whatever was written meanwhile); whether any of them changed."""
        changed = False
        for store, part, merge in ((self.security.members, other.members, merge_members),
                                   (self.security.grants, other.grants, merge_grants),
                                   (self.servers, other.servers, merge_servers)):
            current = store.read()
            if merge(current, part) == merge(current, type(current)()):
                continue  # nothing new: the file is not written (the authority applies what it sees written)
            with store.edit() as mine:
                merged = merge(mine, part)
                if merged != mine:
                    changed = True
                    for field in type(mine).model_fields:
                        setattr(mine, field, getattr(merged, field))
        return changed

    def record_server(self, server: BusServer) -> None:
        """This machine's server, as its authority describes it (its addresses may have changed)."""
        with self.servers.edit() as known:
            old = known.servers.get(server.name)
            if old is None or old.model_dump(exclude={"since"}) != server.model_dump(exclude={"since"}):
                known.servers[server.name] = server
