"""Who reaches which session's checkpoint bucket: `<data dir>/security/session-grants.json`.

Every session has a bucket of its own (`object_store.checkpoint_bucket`). At every placement of a
session, and when it ends, the orchestrator tells the authority which PNodes host it
(`membership_api.SessionHosts`); the authority records that here and reloads the server, whose
configuration gives each PNode the buckets of the sessions it hosts and every orchestrator the
buckets of every session recorded here (`roles.pnode`, `roles.orchestrator`). A placement older than
the recorded one (by the session's log position) is refused, so a driver that lost its session
cannot undo what its successor granted.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from computeall.protocol.credentials import Role
from computeall.protocol.membership_api import SessionHosts

from .roles import EVERY, Sessions


class SessionGrant(BaseModel):
    model_config = ConfigDict(extra="forbid")

    as_of: int  # the session's log position the placement was current at
    pnodes: list[str]  # the PNodes hosting it: none once it ended


class SessionGrants(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # a server that cannot follow placement (a site's leaf server, docker compose) grants every bucket
    every: bool = False
    sessions: dict[str, SessionGrant] = Field(default_factory=dict)

    def reach(self, role: Role, name: str) -> Sessions:
        """The sessions whose buckets identity `role`/`name` reaches; none for a role outside `roles.GRANTED`."""
        if self.every:
            return EVERY
        if role == "orchestrator":
            return tuple(sorted(self.sessions))
        if role == "pnode":
            return tuple(sorted(sid for sid, grant in self.sessions.items() if name in grant.pnodes))
        return ()

    def host(self, request: SessionHosts) -> bool:
        """Record who hosts the session; False (and nothing changes) when a later placement is recorded."""
        known = self.sessions.get(request.session_id)
        if known is not None and known.as_of > request.as_of:
            return False
        self.sessions[request.session_id] = SessionGrant(as_of=request.as_of, pnodes=sorted(set(request.pnodes)))
        return True


EVERY_SESSION = SessionGrants(every=True)
