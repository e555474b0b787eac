"""Files users uploaded, fetched once each from the user's own uploads bucket into the service's uploads folder.

Each user has a bucket (`object_store.uploads_bucket(subjects, user)`), which this service creates when
the user's client asks (`open`): a user may put objects into theirs but never set up a stream, since a
stream's configuration decides which subjects it captures. A request reads only its requester's bucket.

The folder is `<uploads>/<user>/<sha256>/<name>`, content-addressed within each user's part, so a file
named by several of one user's requests is fetched once, and a dataset rebuilt or reused later finds it
without the bucket; one user naming another's digest finds nothing of theirs. A fetch lands in a hidden
staging file that is renamed into place only once every digest matched (`protocol.uploads.fetch`).
"""

from __future__ import annotations

import asyncio
import logging
import os
import uuid
from pathlib import Path

from nats.js import JetStreamContext
from nats.js.errors import BucketNotFoundError
from nats.js.object_store import ObjectStore

from computeall.protocol.object_store import existing_bucket, open_bucket, uploads_bucket
from computeall.protocol.subjects import Subjects
from computeall.protocol.uploads import UploadError, UploadedFile, check_complete, fetch

from .data_roots import confined
from .errors import DatasetUserError

log = logging.getLogger(__name__)

_STAGING_PREFIX = ".staging-"


class UploadCache:
    def __init__(self, root: Path, js: JetStreamContext, subjects: Subjects, replicas: int = 1) -> None:
        root.mkdir(parents=True, exist_ok=True)
        self.root = root.resolve()
        self.js = js
        self.subjects = subjects
        self.replicas = replicas
        self._fetching: dict[tuple[str, str], asyncio.Lock] = {}
        for stale in self.root.glob(f"*/{_STAGING_PREFIX}*"):  # left by a crash mid-fetch
            stale.unlink(missing_ok=True)

    async def open(self, user: str) -> str:
        """`user`'s uploads bucket, created when it is not there yet (at `replicas` copies); its name."""
        bucket = uploads_bucket(self.subjects, user)
        await open_bucket(self.js, bucket, self.replicas)
        return bucket

    async def check(self, user: str, file: UploadedFile) -> None:
        """`DatasetUserError` unless `local` would find `user`'s file: fetched already, or complete in their bucket."""
        if self._paths(user, file)[1].exists():
            return
        try:
            await check_complete(await self._bucket(user, file), file)
        except UploadError as exc:
            raise DatasetUserError(str(exc)) from None

    async def local(self, user: str, file: UploadedFile) -> Path:
        """`user`'s uploaded file in the uploads folder, fetched and checked first when it is not there yet."""
        folder, target = self._paths(user, file)
        lock = self._fetching.setdefault((user, file.sha256), asyncio.Lock())
        async with lock:  # one fetch per file, however many requests name it
            if not target.exists():
                await self._fetch(user, file, folder, target)
        return target

    def _paths(self, user: str, file: UploadedFile) -> tuple[Path, Path]:
        """`user`'s folder, and where their `file` lies in it once fetched: `<uploads>/<user>/<sha256>/<name>`."""
        folder = confined(self.root, user, f"the uploads of {user}")
        return folder, confined(folder, f"{file.sha256}/{file.name}", f"upload {file.name}")

    async def _bucket(self, user: str, file: UploadedFile) -> ObjectStore:
        bucket = uploads_bucket(self.subjects, user)
        try:
            return await existing_bucket(self.js, bucket)
        except BucketNotFoundError:
            raise DatasetUserError(f"{file.name}: you have uploaded nothing yet (there is no bucket {bucket}); upload it "
                                   "(`computeall dataset create --files` and `session create --data` do)") from None

    async def _fetch(self, user: str, file: UploadedFile, folder: Path, target: Path) -> None:
        log.info("fetching upload %s (%d bytes) from bucket %s", file.name, file.size, uploads_bucket(self.subjects, user))
        store = await self._bucket(user, file)
        folder.mkdir(exist_ok=True)
        staging = folder / f"{_STAGING_PREFIX}{uuid.uuid4().hex}"
        try:
            with open(staging, "wb") as out:
                await fetch(store, file, out)
            target.parent.mkdir(exist_ok=True)
            os.replace(staging, target)
        except UploadError as exc:
            raise DatasetUserError(str(exc)) from None
        finally:
            staging.unlink(missing_ok=True)
