"""The authority: the process that owns the NATS server's configuration keeps it equal to the
members list, and answers membership requests (`computeall.protocol.membership_api`).

It applies a change (a reload: the server refuses a revoked member and closes its connections)
when the monitor reports the active API keys, when the orchestrator or the operator revokes a
PNode, when `computeall invite` edits members.json (it is watched), and when a member expires;
and when the orchestrator places a session or ends it (who reaches its checkpoints: `session_grants`).
nats-server gives a live connection its new permissions at the reload, so a PNode granted a bucket
uses it at once, and one no longer granted is refused from then on, without reconnecting.
It also tells the orchestrator how much memory a joining PNode may offer (its record's cap).

On a bus spanning machines every machine runs an authority for its own server (`bus_machine.py`): they
take requests as one queue group, merge their members and grants through a replicated bucket
(`bus_sync.py`), so that a change made on any machine reaches every server, and answer a change once
every live server applied it. They also hand an invited server the deployment's server kit
(`bus_join.py`). Any one machine may die: the authorities of the others go on granting and revoking.
"""

from __future__ import annotations

import asyncio
import logging
import time

from computeall.protocol import bus
from computeall.protocol import membership_api as api
from computeall.protocol.responder import Refused, Responder

from ..nats_server import EmbeddedNats
from .bus_join import JOIN_API, ServerJoin, ServerKit, joining_server, kit_of
from .bus_state import LocalState
from .bus_sync import BusSync
from .members import Member, MemberStore

log = logging.getLogger("computeall.authority")

QUEUE = "authority"  # one authority of a bus spanning machines takes each request


class Authority:
    def __init__(self, server: EmbeddedNats, poll_s: float = 0.5) -> None:
        self.server = server
        self.members = server.security.members
        self.poll_s = poll_s
        self.sync: BusSync | None = None  # with the other machines' authorities, on a bus spanning machines

    async def run(self) -> None:
        """Serve requests and watch the members file until cancelled."""
        nc = await bus.connect(self.server.credential("authority"), name="computeall-authority", max_reconnect_attempts=-1)
        subjects = self.server.security.subjects
        # in order, per verb: each edits the members or the grants and reloads the server
        responder = Responder(nc, subjects, api.API, {
            api.USERS: self._sync_users, api.REVOKE_PNODE: self._revoke_pnode,
            api.SESSION_HOSTS: self._host_session, api.PNODE_MEMORY: self._pnode_memory,
        }, concurrent=False, queue=QUEUE)
        await responder.start()
        tasks = []
        if hasattr(self.server, "live_servers"):  # one server of a bus spanning machines (`MachineServer`)
            self.sync = BusSync(nc, subjects, LocalState(self.server.security), self.server.name, self._apply_here,
                                self.server.live_servers, self.poll_s)
            await Responder(nc, subjects, JOIN_API, {api.SERVER_JOIN: self._join}, concurrent=False, queue=QUEUE).start()
            tasks.append(asyncio.create_task(self.sync.run()))
        try:
            await self._watch()
        finally:
            for task in tasks:
                task.cancel()
            await nc.close()

    async def _apply(self) -> None:
        """This machine's server takes the change; on a bus spanning machines, every live server (`spread`)."""
        await self._apply_here()
        if self.sync is not None:
            await self.sync.spread()

    async def _apply_here(self) -> None:
        await asyncio.to_thread(self.server.apply_members)

    async def _join(self, request: ServerJoin, asker: str) -> ServerKit:
        """An invited server asks for the kit (`bus_join.py`); answered only while its invite is active."""
        name = joining_server(asker, request)
        if not any(m.role == "server" and m.name == name for m in self.members.read().active()):
            raise Refused(f"the invite of server {name} was revoked or has expired; make a new one "
                          "(`computeall invite server`)")
        self.sync.local.record_server(request.server)
        await self._apply()  # the others route to it from now on
        log.warning("server %s joined the bus (%s)", name, request.server.route)
        return kit_of(self.server.security)

    async def _sync_users(self, request: api.UsersSync, asker: str) -> api.MembershipReply:
        wanted = {k.nkey: k for k in request.keys}
        revoked = []
        with self.members.edit() as members:
            for m in members.members:
                if m.source == "api-key" and m.revoked is None and m.public_key not in wanted:
                    m.revoked = time.time()
                    revoked.append(m.id)
            for key in wanted.values():
                if members.by_key(key.nkey) is None:
                    members.members.append(Member(id=key.key_id, role="user", name=key.user, public_key=key.nkey, source="api-key"))
        await self._apply()
        return api.MembershipReply(revoked=revoked)

    async def _revoke_pnode(self, request: api.RevokePNode, asker: str) -> api.MembershipReply:
        revoked = revoke_pnode(self.members, request.pnode)
        if not revoked:
            raise Refused(f"no active credential of PNode {request.pnode}")
        log.warning("%s revoked PNode %s (%s)", asker, request.pnode, request.reason or "no reason given")
        await self._apply()
        return api.MembershipReply(revoked=revoked)

    async def _host_session(self, request: api.SessionHosts, asker: str) -> api.MembershipReply:
        with self.server.security.grants.edit() as grants:
            recorded = grants.host(request)
        if not recorded:
            raise Refused(f"session {request.session_id} has a later placement than log position {request.as_of}")
        await self._apply()
        return api.MembershipReply()

    async def _pnode_memory(self, request: api.PNodeMemory, asker: str | None = None) -> api.MembershipReply:
        """The record's cap: the same whoever asks."""
        return api.MembershipReply(memory_bytes=self.members.read().pnode_memory(request.pnode))

    async def _watch(self) -> None:
        """Apply edits made by other processes (`computeall invite`) and expiries as they come."""
        seen, due = None, None  # the file's last applied version; when the next active member expires
        while True:
            stamp = self.members.path.stat().st_mtime_ns if self.members.path.exists() else None
            if stamp != seen or (due is not None and due <= time.time()):
                try:
                    await self._apply()
                    seen = stamp
                except RuntimeError as exc:  # the server did not reload: try again next round
                    log.warning("%s", exc)
            # read after applying: a member that expires is no longer active, so it must be awaited from before
            due = self.members.read().next_expiry()
            await asyncio.sleep(self.poll_s)


def revoke_pnode(store: MemberStore, pnode: str) -> list[str]:
    """Mark every active credential of `pnode` revoked; their member ids."""
    revoked = []
    with store.edit() as members:
        for m in members.active():
            if m.role == "pnode" and m.name == pnode:
                m.revoked = time.time()
                revoked.append(m.id)
    return revoked
