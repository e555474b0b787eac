"""Files clients uploaded, fetched once each from the uploads bucket into the service's uploads folder.

The folder is a data root: `<uploads>/<sha256>/<name>`, content-addressed, so a file named by
several requests is fetched once, and a dataset rebuilt or reused later finds it without the
bucket. A fetch lands in a hidden staging file that is renamed into place only once every digest
matched (`protocol.uploads.fetch`).
"""

from __future__ import annotations

import asyncio
import logging
import os
import uuid
from pathlib import Path

from nats.js import JetStreamContext

from computeall.protocol.object_store import open_bucket
from computeall.protocol.uploads import UploadError, UploadedFile, fetch

from .errors import DatasetUserError

log = logging.getLogger(__name__)

_STAGING_PREFIX = ".staging-"


class UploadCache:
    def __init__(self, root: Path, js: JetStreamContext, bucket: str) -> None:
        self.root = root
        self.root.mkdir(parents=True, exist_ok=True)
        self.js = js
        self.bucket = bucket
        self._store = None
        self._fetching: dict[str, asyncio.Lock] = {}
        for stale in self.root.glob(f"{_STAGING_PREFIX}*"):  # left by a crash mid-fetch
            stale.unlink(missing_ok=True)

    async def open(self, replicas: int = 1) -> None:
        """Create the bucket clients upload to (clients only put objects in it)."""
        self._store = await open_bucket(self.js, self.bucket, replicas)

    async def local(self, file: UploadedFile) -> Path:
        """The uploaded file in the uploads folder, fetched and checked first when it is not there yet."""
        target = self.root / file.sha256 / file.name
        lock = self._fetching.setdefault(file.sha256, asyncio.Lock())
        async with lock:  # one fetch per file, however many requests name it
            if not target.exists():
                await self._fetch(file, target)
        return target

    async def _fetch(self, file: UploadedFile, target: Path) -> None:
        log.info("fetching upload %s (%d bytes) from bucket %s", file.name, file.size, self.bucket)
        staging = self.root / f"{_STAGING_PREFIX}{uuid.uuid4().hex}"
        try:
            with open(staging, "wb") as out:
                await fetch(self._store, file, out)
            target.parent.mkdir(exist_ok=True)
            os.replace(staging, target)
        except UploadError as exc:
            raise DatasetUserError(str(exc)) from None
        finally:
            staging.unlink(missing_ok=True)
