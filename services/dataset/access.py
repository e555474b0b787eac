"""Who may read a dataset: its owner; every user once its owner made it public (read only); and the PNodes
the orchestrator granted it to for a session that trains on it (`protocol.batch_grants`).

The requester is the one its request's subject names (`dataset_api.Requester`), never a field. Another
user's private dataset reads as a missing one, the way another user's session does.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from nats.js import JetStreamContext
from nats.js.errors import BucketNotFoundError
from nats.js.kv import KeyValue

from computeall.protocol.batch_grants import granted, grants_bucket
from computeall.protocol.dataset_api import Requester
from computeall.protocol.subjects import Subjects

from .errors import DatasetUserError
from .manifest import Manifest
from .store import DatasetStore

Rule = Callable[[str, str, str | None], Awaitable[Manifest | None]]  # (requester, dataset, session)


def not_yours(name: str) -> DatasetUserError:
    return DatasetUserError(f"no dataset named {name!r} is yours or public; `computeall dataset list` shows the ones "
                            "you may use, `computeall dataset create` makes one")


class Access:
    def __init__(self, store: DatasetStore, js: JetStreamContext, subjects: Subjects) -> None:
        self.store = store
        self.js = js
        self.subjects = subjects
        self._grants: KeyValue | None = None
        self._rules: dict[str, Rule] = {"user": self._user, "pnode": self._pnode}

    async def check(self, asker: Requester, name: str, session_id: str | None = None) -> Manifest | None:
        """Raises unless `asker` may read dataset `name`; a user gets the manifest that says so."""
        return await self._rules[asker.kind](asker.name, name, session_id)

    async def owned(self, user: str, name: str) -> Manifest:
        """The manifest of `user`'s own dataset `name` (what only its owner may change)."""
        manifest = await self._user(user, name, None)
        if manifest.owner != user:
            raise DatasetUserError(f"dataset {name!r} is {manifest.owner}'s: only its owner may share it or make it private")
        return manifest

    async def _user(self, user: str, name: str, session_id: str | None) -> Manifest:
        manifest = await self.store.current(name)
        if manifest is None or not manifest.readable_by(user):
            raise not_yours(name)
        return manifest

    async def _pnode(self, pnode: str, name: str, session_id: str | None) -> None:
        if session_id is None:
            raise DatasetUserError(f"PNode {pnode}: a batch request of a PNode names the session it reads for (session_id)")
        grant = await granted(self._grants or await self._open_grants(), session_id)
        if grant is None or grant.dataset != name or pnode not in grant.pnodes:
            raise DatasetUserError(f"PNode {pnode} may not read dataset {name!r} for session {session_id}: the orchestrator "
                                   "grants a session's dataset to the PNodes of its plan, and only while it runs")
        return None

    async def _open_grants(self) -> KeyValue:
        try:
            self._grants = await self.js.key_value(grants_bucket(self.subjects))
        except BucketNotFoundError:  # the orchestrator makes it with the first grant
            raise DatasetUserError("no PNode may read batches yet: the orchestrator has granted none") from None
        return self._grants
