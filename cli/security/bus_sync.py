"""Keeping the servers of a bus spanning machines on one security state (`bus_state.py`).

Every machine's authority runs a `BusSync`. Each round (every half second) it merges its machine's files
with the value in the bucket: what the files have that the bucket lacks goes up (an update that expects
the key's revision; a conflict is merged again), what the bucket has goes into the files, and its server
reloads when the configuration it generates changed. The bucket is what a machine that was down (or
whose disk was replaced) catches up from.

A request that changes the state (an invite, a placement's grants, a revocation) is answered once every
server the local one routes to applied it: the authority that took it sends its whole state to the
others (`<prefix>.sec.sync`), which merge it into their files, apply it and answer with their server's
name (`spread`). That path needs no bucket, hence no JetStream leader: when a machine dies, the leaders it
held are elected again elsewhere for up to `bus_failover.ELECTION_MAX_S`, and a placement made meanwhile
(the sessions a standby takes over) must not wait for them.

The bucket needs a JetStream majority: while there is none (the first machine waits for its peers, or
two of three are down) rounds fail and are tried again, and every server keeps its last configuration.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Awaitable, Callable

import nats.errors
from nats.aio.client import Client as NATS
from nats.js.api import KeyValueConfig, StorageType
from nats.js.errors import BucketNotFoundError, KeyNotFoundError, KeyWrongLastSequenceError
from nats.js.kv import KeyValue
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from computeall.protocol.bus_failover import TRANSIENT
from computeall.protocol.credentials import inbox_owner
from computeall.protocol.membership_api import SYNC, membership_subject, security_bucket
from computeall.protocol.subjects import Subjects

from .bus_state import LocalState, SharedState

log = logging.getLogger("computeall.authority")

STATE_KEY = "state"
REPLICAS = 3  # one copy per machine: the bucket outlives any one of them
SPREAD_S = 10.0  # how long a change waits for the other servers before it is answered anyway


class SyncRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    state: SharedState = Field(..., description="the asking authority's state, with the change")


class SyncReply(BaseModel):
    model_config = ConfigDict(extra="forbid")

    server: str = Field(..., description="the server whose configuration now holds the asking authority's state")


class BusSync:
    def __init__(self, nc: NATS, subjects: Subjects, local: LocalState, server_name: str,
                 apply: Callable[[], Awaitable[None]], live_servers: Callable[[], set[str]],
                 poll_s: float = 0.5) -> None:
        """`apply`: bring this machine's server up to its files; `live_servers`: the names of the servers
        this one routes to now, itself included."""
        self.nc = nc
        self.subjects = subjects
        self.local = local
        self.server_name = server_name
        self.apply = apply
        self.live_servers = live_servers
        self.poll_s = poll_s
        self.revision = 0  # of the bucket's value this server's configuration holds
        self._kv: KeyValue | None = None
        self._lock = asyncio.Lock()

    async def run(self) -> None:
        """Answer the others' sync requests and take a round every `poll_s`, until cancelled."""
        await self.nc.subscribe(membership_subject(self.subjects, SYNC), cb=self._on_sync)
        while True:
            try:
                await self.round()
            except (*TRANSIENT, nats.errors.Error, OSError) as exc:  # no majority yet, or failing over
                log.debug("security state not merged this round: %s", exc)
                self._kv = None
            await asyncio.sleep(self.poll_s)

    async def round(self) -> int:
        """Merge the files with the bucket both ways, apply; the bucket's revision reached."""
        async with self._lock:
            kv = await self._bucket()
            for _ in range(10):
                remote, revision = await _get(kv)
                merged = self.local.read().merge(remote)
                if merged != remote:
                    data = merged.model_dump_json().encode()
                    try:
                        revision = await (kv.update(STATE_KEY, data, last=revision) if revision
                                          else kv.create(STATE_KEY, data))
                    except KeyWrongLastSequenceError:
                        continue  # another authority wrote first: merge with what it wrote
                if self.local.absorb(merged) or self.revision == 0:
                    await self.apply()
                self.revision = revision
                return revision
            raise nats.errors.TimeoutError  # ten conflicts in a row: the next round tries again

    async def spread(self, timeout_s: float = SPREAD_S) -> None:
        """After a change to this machine's files: once every live server holds it (or after `timeout_s`). The
        bucket takes it with the next round."""
        wanted = self.live_servers() - {self.server_name}
        if not wanted:
            return
        inbox = self.nc.new_inbox()
        sub = await self.nc.subscribe(inbox)
        try:
            request = SyncRequest(state=self.local.read()).model_dump_json().encode()
            await self.nc.publish(membership_subject(self.subjects, SYNC), request, reply=inbox)
            deadline = time.monotonic() + timeout_s
            while wanted and time.monotonic() < deadline:
                try:
                    msg = await sub.next_msg(timeout=max(0.01, deadline - time.monotonic()))
                    wanted.discard(SyncReply.model_validate_json(msg.data).server)
                except (nats.errors.TimeoutError, ValidationError):
                    continue
            if wanted:
                log.warning("servers %s did not confirm a change of the security state within %.0fs",
                            sorted(wanted), timeout_s)
        finally:
            await sub.unsubscribe()

    async def _on_sync(self, msg) -> None:
        """Another authority's state, merged and applied. Only authorities and the operators may publish on
        `<prefix>.sec.>` (the operator's own members file goes the same way), and the answer goes only to an
        authority's inbox."""
        if (inbox_owner(msg.reply) or "").partition(":")[0] != "authority":
            return
        try:
            request = SyncRequest.model_validate_json(msg.data)
        except ValidationError as exc:
            log.info("sync request not taken: %s", str(exc)[:200])
            return
        async with self._lock:
            if self.local.absorb(request.state):
                await self.apply()
        await msg.respond(SyncReply(server=self.server_name).model_dump_json().encode())

    async def _bucket(self) -> KeyValue:
        if self._kv is None:
            js = self.nc.jetstream()
            bucket = security_bucket(self.subjects)
            try:
                self._kv = await js.key_value(bucket)
            except BucketNotFoundError:
                self._kv = await js.create_key_value(KeyValueConfig(
                    bucket=bucket, history=1, storage=StorageType.FILE, replicas=REPLICAS, direct=False))
        return self._kv


async def _get(kv: KeyValue) -> tuple[SharedState, int]:
    """The bucket's value and its revision (an empty state at 0 before anyone wrote)."""
    try:
        entry = await kv.get(STATE_KEY)
    except KeyNotFoundError:
        return SharedState(), 0
    return SharedState.model_validate_json(entry.value), entry.revision
