"""Membership requests on `<prefix>.sec.<verb>` (request/reply, not recorded), answered by the
authority: the process that owns the NATS server's configuration (`computeall up`).

    users        UsersSync   the monitor: the identities of every active API key (a key made or
                             revoked on the dashboard connects, or is cut off, within seconds)
    pnode.revoke RevokePNode the orchestrator (quarantine) or the operator: a PNode's credential
                             is revoked and its connections closed
    session.hosts SessionHosts the orchestrator, at every placement of a session and when it ends:
                             the PNodes that host it, the only ones that reach its checkpoint bucket
    pnode.memory PNodeMemory the orchestrator, when a PNode joins: the most memory its credential
                             allows it to offer (`memory_bytes`), whatever its heartbeats claim
    server.join  (cli)       a machine invited to run a server of the bus (`computeall up --join-bus`),
                             as its invite's `server` identity: the deployment's server kit
    sync         (cli)       an authority, to the others of a bus spanning machines: take the
                             replicated members and grants now, answer once your server applied them

Only the monitor may publish `users`, only the orchestrator and the operator `pnode.*`, and only
the orchestrator `session.hosts` (their credentials' permissions); every reply is a
`MembershipReply`, sent once the server applies the change.

A PNode's memory cap is the member record's (`computeall invite pnode --memory`, or what `computeall
up` gave the PNodes it starts), else `DEFAULT_PNODE_MEMORY`: an invite that names no memory, a PNode
with no record, and every PNode where no authority answers (docker-compose) get the default.
"""

from __future__ import annotations

from nats.aio.client import Client as NATS
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from .credentials import NAME_PATTERN
from .responder import Api, Endpoint, by_inbox
from .subjects import Subjects

USERS = "users"
REVOKE_PNODE = "pnode.revoke"
SESSION_HOSTS = "session.hosts"
PNODE_MEMORY = "pnode.memory"
SERVER_JOIN = "server.join"
SYNC = "sync"

# The most a PNode may offer when its member record names no cap: what an ordinary lent machine
# has. Its offer is only its word; this bounds how much of a network one credential can claim.
DEFAULT_PNODE_MEMORY = 16 * 2**30


def membership_subject(subjects: Subjects, verb: str) -> str:
    return f"{subjects.prefix}.sec.{verb}"


def security_bucket(subjects: Subjects) -> str:
    """The key-value bucket where the authorities of a bus spanning machines merge their members and
    grants (only they reach it)."""
    return f"{subjects.prefix}-security"


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid")


class UserKey(BaseModel):
    model_config = ConfigDict(extra="forbid")

    user: str = Field(..., pattern=NAME_PATTERN)
    nkey: str = Field(..., pattern=r"^U[A-Z2-7]{55}$", description="the public nkey derived from the API key")
    key_id: str


class UsersSync(_Request):
    """Every active API key's identity; a key missing from the list is revoked."""

    keys: list[UserKey]


class RevokePNode(_Request):
    """Revoke every credential of this PNode and close its connections."""

    pnode: str = Field(..., pattern=NAME_PATTERN)
    reason: str = Field("", max_length=500)


class SessionHosts(_Request):
    """The PNodes that host a session now: they, and no other PNode, reach its checkpoint bucket (an
    empty list when the session ends). The orchestrators reach the bucket of every session named here."""

    session_id: str = Field(..., pattern=NAME_PATTERN)
    pnodes: list[Annotated[str, Field(pattern=NAME_PATTERN)]] = Field(..., max_length=4096)
    as_of: int = Field(..., ge=0, description="the session's log position the placement is current at: the "
                       "latest wins, so a driver that lost the session cannot undo its successor's grants")


class PNodeMemory(_Request):
    """The most memory this PNode may offer, from its member record."""

    pnode: str = Field(..., pattern=NAME_PATTERN)


class MembershipReply(BaseModel):
    ok: bool = True
    error: str | None = None
    revoked: list[str] = Field(default_factory=list, description="member ids revoked by this request")
    memory_bytes: int | None = Field(None, ge=0, description="pnode.memory: the PNode's cap")


API: Api[str] = Api("the authority", MembershipReply, (
    Endpoint(USERS, UsersSync, "the monitor's list of active API-key identities"),
    Endpoint(REVOKE_PNODE, RevokePNode, "revoke a PNode's credential, close its connections"),
    Endpoint(SESSION_HOSTS, SessionHosts, "the PNodes that host a session: only they reach its checkpoint bucket"),
    Endpoint(PNODE_MEMORY, PNodeMemory, "a PNode's memory cap, from its credential's record"),
), listen=lambda subjects, verb: (membership_subject(subjects, verb),), asker=by_inbox)


class MembershipError(RuntimeError):
    """The authority refused or failed; the message says why."""


async def _ask(nc: NATS, subjects: Subjects, verb: str, request: BaseModel, timeout: float) -> MembershipReply:
    msg = await nc.request(membership_subject(subjects, verb), request.model_dump_json().encode(), timeout=timeout)
    reply = MembershipReply.model_validate_json(msg.data)
    if not reply.ok:
        raise MembershipError(reply.error or "refused")
    return reply


async def sync_users(nc: NATS, subjects: Subjects, keys: list[UserKey], timeout: float = 15.0) -> MembershipReply:
    return await _ask(nc, subjects, USERS, UsersSync(keys=keys), timeout)


async def revoke_pnode(nc: NATS, subjects: Subjects, pnode: str, reason: str = "", timeout: float = 15.0) -> MembershipReply:
    """Revoke PNode `pnode`'s credential: the server refuses it from now on and closes its live
    connections before this returns (the verification work calls it to quarantine a PNode).
    Raises `MembershipError` when refused, nats-py's errors when no authority answers."""
    return await _ask(nc, subjects, REVOKE_PNODE, RevokePNode(pnode=pnode, reason=reason), timeout)


async def host_session(nc: NATS, subjects: Subjects, session_id: str, pnodes: list[str], as_of: int,
                       timeout: float = 15.0) -> MembershipReply:
    """Grant the PNodes that host `session_id` its checkpoint bucket, and take it from every other PNode;
    returns once the server applies it. Raises `MembershipError` when refused (a later placement won)."""
    return await _ask(nc, subjects, SESSION_HOSTS, SessionHosts(session_id=session_id, pnodes=pnodes, as_of=as_of), timeout)


async def pnode_memory(nc: NATS, subjects: Subjects, pnode: str, timeout: float = 2.0) -> int:
    """The most memory PNode `pnode` may offer (bytes). Raises nats-py's errors when no authority
    answers: the caller then applies `DEFAULT_PNODE_MEMORY`."""
    reply = await _ask(nc, subjects, PNODE_MEMORY, PNodeMemory(pnode=pnode), timeout)
    return DEFAULT_PNODE_MEMORY if reply.memory_bytes is None else reply.memory_bytes
