"""A session's own checkpoint bucket: who reaches it, what is copied into it, what is taken out.

Each session keeps its checkpoints in a bucket of its own (`object_store.checkpoint_bucket`), which
nats-server can grant by name. At every placement `host` has the authority let exactly the
allocation's PNodes reach it, and waits until the server applies that, before any plan is sent;
`release` takes it from all of them when the driver stops. Whatever a session loads from elsewhere
(uploaded weights, another session's checkpoint, the checkpoint a verification run replays) is
first copied in by `take_in`, streamed through a temporary file, so its PNodes read their own
session's bucket and nothing else. Only the orchestrator deletes from the bucket (`delete`, `sweep`),
and it judges itself whether an object is damaged (`damage`): a PNode's word never discards one.

With `grants="every"` (docker compose, which has no authority) the server's configuration grants
every session's bucket already, and nobody is asked.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Iterable
from typing import Literal

import nats.errors
from nats.aio.client import Client as NATS
from nats.js.errors import NotFoundError, ObjectNotFoundError
from nats.js.object_store import ObjectStore

from computeall.protocol import bus
from computeall.protocol.bus_failover import through_failover
from computeall.protocol.membership_api import MembershipError, host_session
from computeall.protocol.object_store import (
    CheckpointObject,
    ObjectDamaged,
    checkpoint_bucket,
    existing_bucket,
    open_bucket,
    put_file,
    read_checked,
)
from computeall.protocol.subjects import Subjects

from .errors import SessionError, StepStalled

log = logging.getLogger("computeall.orchestrator.session_storage")

Grants = Literal["authority", "every"]
GRANTS: tuple[Grants, ...] = ("authority", "every")


class SessionStorage:
    def __init__(self, nc: NATS, subjects: Subjects, session_id: str, grants: Grants) -> None:
        self.nc = nc
        self.subjects = subjects
        self.session_id = session_id
        self.grants = grants
        self.bucket = checkpoint_bucket(subjects, session_id)
        self.hosted = False  # whether a placement granted the bucket: only then is there anything to release

    # -- who reaches it --------------------------------------------------------------------
    async def host(self, pnodes: Iterable[str], as_of: int) -> None:
        """Only `pnodes` reach the bucket from now on (it is made on first use); returns once the server says so."""
        await self._grant(sorted(pnodes), as_of)
        self.hosted = True
        await open_bucket(self.nc.jetstream(), self.bucket, bus.replicas(self.nc))

    async def release(self, as_of: int) -> None:
        """No PNode reaches the bucket any more (the driver stops); the orchestrators still do."""
        if not self.hosted:
            return
        try:
            await self._grant([], as_of)
        except (SessionError, nats.errors.Error, TimeoutError) as exc:  # the next placement grants anew
            log.warning("session %s: its PNodes keep its bucket until its next placement: %s", self.session_id, exc)

    async def _grant(self, pnodes: list[str], as_of: int) -> None:
        if self.grants == "every":
            return
        try:
            await host_session(self.nc, self.subjects, self.session_id, pnodes, as_of)
        except MembershipError as exc:
            raise SessionError(f"the authority refused the placement's grants: {exc}") from None
        except nats.errors.NoRespondersError:
            raise SessionError("no authority answers to grant the PNodes this session's checkpoints: is `computeall up` "
                               "running? (docker compose runs the orchestrator with --storage-grants every)") from None
        except nats.errors.TimeoutError:
            # a slow authority, or its reply lost with a nats-server: nobody's fault, and placing again grants again
            raise StepStalled("the authority did not answer the placement's grants in time") from None

    # -- what is in it ---------------------------------------------------------------------
    async def store(self) -> ObjectStore:
        return await existing_bucket(self.nc.jetstream(), self.bucket)

    async def take_in(self, bucket: str, objects: list[CheckpointObject]) -> list[CheckpointObject]:
        """Copies of `objects` (in `bucket`) in this session's bucket, each checked against its digest on the
        way; `ObjectDamaged` when one is missing or altered. Streamed: an object is never whole in memory."""
        source = await existing_bucket(self.nc.jetstream(), bucket)
        ours = await self.store()
        copies = []
        for entry in objects:
            name = f"imported/{bucket}/{entry.object}"
            with tempfile.TemporaryFile() as spool:
                await read_checked(source, bucket, entry, spool)
                await put_file(ours, name, spool)
            copies.append(entry.model_copy(update={"object": name}))
        return copies

    async def damage(self, objects: list[CheckpointObject]) -> str | None:
        """What is wrong with `objects` in this session's bucket, read here and checked against their
        digests; None when all are intact. nats-py's errors when the bucket cannot be read at all."""
        store = await self.store()
        for entry in objects:
            try:
                await read_checked(store, self.bucket, entry, None)
            except ObjectDamaged as exc:
                return str(exc)
        return None

    async def delete(self, objects: Iterable[CheckpointObject]) -> None:
        """Delete these objects of this session's bucket (one already gone is fine)."""
        store = await self.store()
        for entry in objects:
            await _delete(store, entry.object)

    async def sweep(self, keep: set[str]) -> None:
        """Delete every object of the bucket but `keep`: what a save that never committed left behind
        (PNodes write, never replace: they may not purge an object's old chunks)."""
        store = await self.store()
        try:
            present = await through_failover(lambda: store.list(ignore_deletes=True), f"listing {self.bucket}")
        except NotFoundError:  # nothing in it yet
            return
        for info in present:
            if info.name not in keep:
                await _delete(store, info.name)


async def _delete(store: ObjectStore, name: str) -> None:
    try:
        await store.delete(name)
    except ObjectNotFoundError:
        pass  # gone already: the log no longer names it
    except (nats.errors.Error, TimeoutError) as exc:  # left for the next sweep
        log.warning("could not delete %s: %s", name, exc)
