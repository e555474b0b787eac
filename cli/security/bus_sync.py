"""Keeping the servers of a bus spanning machines on one security state (`bus_state.py`).

Every machine's authority runs a `BusSync`. Each round (every half second, and at once when asked) it
merges its machine's files with the value in the bucket: what the files have that the bucket lacks goes
up (an update that expects the key's revision; a conflict is merged again), what the bucket has goes
into the files, and its server reloads when the configuration it generates changed. A request that
changes the state (an invite, a placement's grants, a revocation) is answered once every server the
local one routes to applied it: the authority that took it asks the others (`<prefix>.sec.sync`) to
take a round and to answer with their server's name and the revision they reached (`spread`).

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
from computeall.protocol.membership_api import SYNC, membership_subject, security_bucket
from computeall.protocol.subjects import Subjects, is_inbox

from .bus_state import LocalState, SharedState

log = logging.getLogger("computeall.authority")

STATE_KEY = "state"
REPLICAS = 3  # one copy per machine: the bucket outlives any one of them
SPREAD_S = 10.0  # how long a change waits for the other servers before it is answered anyway


class SyncRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    revision: int = Field(..., ge=0, description="the bucket's revision the asking authority wrote")


class SyncReply(BaseModel):
    model_config = ConfigDict(extra="forbid")

    server: str
    revision: int = Field(..., ge=0, description="the bucket's revision this server's configuration now holds")


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
        """After a change to this machine's files: once every live server holds it (or after `timeout_s`). While
        the bucket cannot be reached (no majority), the change stays here and goes up with a later round."""
        try:
            revision = await self.round()
        except (*TRANSIENT, nats.errors.Error, OSError) as exc:
            log.info("the security state stays on this machine for now: %s", type(exc).__name__)
            self._kv = None
            return
        wanted = self.live_servers() - {self.server_name}
        if not wanted:
            return
        inbox = self.nc.new_inbox()
        sub = await self.nc.subscribe(inbox)
        try:
            await self.nc.publish(membership_subject(self.subjects, SYNC), SyncRequest(revision=revision)
                                  .model_dump_json().encode(), reply=inbox)
            deadline = time.monotonic() + timeout_s
            while wanted and time.monotonic() < deadline:
                try:
                    msg = await sub.next_msg(timeout=max(0.01, deadline - time.monotonic()))
                    reply = SyncReply.model_validate_json(msg.data)
                except (nats.errors.TimeoutError, ValidationError):
                    continue
                if reply.revision >= revision:
                    wanted.discard(reply.server)
            if wanted:
                log.warning("servers %s did not confirm revision %d of the security state within %.0fs",
                            sorted(wanted), revision, timeout_s)
        finally:
            await sub.unsubscribe()

    async def _on_sync(self, msg) -> None:
        try:
            SyncRequest.model_validate_json(msg.data)
            revision = await self.round()
        except (ValidationError, *TRANSIENT, nats.errors.Error) as exc:
            log.info("sync request not taken: %s", str(exc)[:200])
            return
        if is_inbox(msg.reply):
            await msg.respond(SyncReply(server=self.server_name, revision=revision).model_dump_json().encode())

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
