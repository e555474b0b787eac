"""Where datasets live: the service's data directory, mirrored to the JetStream Object Store.

Locally each dataset is `<data-dir>/datasets/<name>/` (manifest, tokenizer, shards).
Builds and fetches happen in a hidden staging folder that is renamed into place in
one step, so a folder with a manifest is always complete. Publication puts the
manifest last for the same reason: a service on another machine (with another data
directory) that sees a manifest in the bucket can fetch every file it names, and
checks each against its digest.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import shutil
import uuid
from pathlib import Path

from nats.js import JetStreamContext
from nats.js.api import ObjectMeta, ObjectMetaOptions
from nats.js.errors import NotFoundError, ObjectNotFoundError

from computeall.protocol.object_store import open_bucket

from .errors import DatasetUserError
from .manifest import MANIFEST_FILE, Manifest

log = logging.getLogger(__name__)

_STAGING_PREFIX = ".staging-"


class DatasetStore:
    def __init__(self, data_dir: Path, js: JetStreamContext, bucket: str, chunk_bytes: int) -> None:
        self.root = data_dir / "datasets"
        self.root.mkdir(parents=True, exist_ok=True)
        self.js = js
        self.bucket = bucket
        self.chunk_bytes = chunk_bytes
        self._objects = None
        self._fetching: dict[str, asyncio.Lock] = {}
        for stale in self.root.glob(f"{_STAGING_PREFIX}*"):  # left by a crash mid-build
            shutil.rmtree(stale, ignore_errors=True)

    async def open(self, replicas: int = 1) -> None:
        self._objects = await open_bucket(self.js, self.bucket, replicas)

    # -- local ---------------------------------------------------------------
    def path(self, name: str) -> Path:
        return self.root / name

    def local(self, name: str) -> Manifest | None:
        path = self.path(name) / MANIFEST_FILE
        return Manifest.model_validate_json(path.read_bytes()) if path.exists() else None

    def staging(self) -> Path:
        path = self.root / f"{_STAGING_PREFIX}{uuid.uuid4().hex}"
        path.mkdir()
        return path

    def commit(self, staging: Path, manifest: Manifest) -> None:
        (staging / MANIFEST_FILE).write_text(manifest.model_dump_json(indent=1))
        target = self.path(manifest.name)
        if target.exists():
            raise DatasetUserError(f"dataset {manifest.name!r} appeared while this one was built; choose another name")
        staging.rename(target)

    # -- the Object Store ----------------------------------------------------
    def _object(self, name: str, file: str) -> str:
        return f"{name}/{file}"

    async def published(self, name: str) -> Manifest | None:
        try:
            result = await self._objects.get(self._object(name, MANIFEST_FILE))
        except (ObjectNotFoundError, NotFoundError):
            return None
        return Manifest.model_validate_json(result.data)

    async def publish(self, manifest: Manifest) -> None:
        folder = self.path(manifest.name)
        options = ObjectMetaOptions(max_chunk_size=self.chunk_bytes)
        for file, _ in manifest.files_to_fetch():
            with open(folder / file, "rb") as f:
                await self._objects.put(self._object(manifest.name, file), f, meta=ObjectMeta(options=options))
        await self._objects.put(self._object(manifest.name, MANIFEST_FILE), (folder / MANIFEST_FILE).read_bytes())

    async def all_published(self) -> list[Manifest]:
        try:
            infos = await self._objects.list()
        except NotFoundError:  # an empty bucket
            return []
        out = []
        for info in infos:
            if info.name.endswith(f"/{MANIFEST_FILE}") and not info.deleted:
                manifest = await self.published(info.name.rsplit("/", 1)[0])
                if manifest:
                    out.append(manifest)
        return out

    async def find(self, name: str) -> Manifest | None:
        """The local dataset, else fetched from the Object Store into the data directory, else None."""
        manifest = self.local(name)
        if manifest:
            return manifest
        lock = self._fetching.setdefault(name, asyncio.Lock())
        async with lock:  # one fetch per dataset, however many batch requests wait for it
            return self.local(name) or await self._fetch(name)

    async def _fetch(self, name: str) -> Manifest | None:
        manifest = await self.published(name)
        if manifest is None:
            return None
        log.info("fetching dataset %s from object store bucket %s", name, self.bucket)
        staging = self.staging()
        try:
            for file, digest in manifest.files_to_fetch():
                target = staging / file
                target.parent.mkdir(parents=True, exist_ok=True)
                with open(target, "wb") as out:
                    await self._objects.get(self._object(name, file), writeinto=out)
                if await asyncio.to_thread(_file_digest, target) != digest:
                    raise DatasetUserError(f"dataset {name!r}: {file} from the object store does not match its digest; recreate the dataset")
            self.commit(staging, manifest)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        return manifest


def _file_digest(path: Path) -> str:
    h = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
