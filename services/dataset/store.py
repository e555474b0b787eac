"""Where datasets live: the service's data directory, mirrored to the JetStream Object Store.

Locally each dataset is `<data-dir>/datasets/<name>/` (manifest, tokenizer, shards).
Builds and fetches happen in a hidden staging folder that is renamed into place in
one step, so a folder with a manifest is always complete. Publication puts the
manifest last for the same reason: a service on another machine (with another data
directory) that sees a manifest in the bucket can fetch every file it names, and
checks each against its digest.

The published manifest is the one that says who may read a dataset (its owner, and everyone
once it is public): `share` rewrites it there and here, and every instance of the service reads
it from the bucket before it answers a user. Every path is built through `data_roots.confined`.
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
from pydantic import ValidationError

from computeall.protocol.dataset_names import MANIFEST_FILE
from computeall.protocol.object_store import open_bucket

from .data_roots import confined
from .errors import DatasetUserError
from .manifest import Manifest

log = logging.getLogger(__name__)

_STAGING_PREFIX = ".staging-"


class DatasetStore:
    def __init__(self, data_dir: Path, js: JetStreamContext, bucket: str, chunk_bytes: int) -> None:
        (data_dir / "datasets").mkdir(parents=True, exist_ok=True)
        self.root = (data_dir / "datasets").resolve()
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
        return confined(self.root, name, f"dataset {name!r}")

    def file(self, manifest: Manifest, file: str) -> Path:
        """A file the manifest names, inside the dataset's folder."""
        return confined(self.path(manifest.name), file, f"dataset {manifest.name!r}")

    def local(self, name: str) -> Manifest | None:
        path = confined(self.path(name), MANIFEST_FILE, f"dataset {name!r}")
        return _manifest(name, path.read_bytes(), "here") if path.exists() else None

    def staging(self) -> Path:
        path = self.root / f"{_STAGING_PREFIX}{uuid.uuid4().hex}"
        path.mkdir()
        return path

    def commit(self, staging: Path, manifest: Manifest) -> None:
        _write_manifest(staging, manifest)
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
        return _manifest(name, result.data, f"in bucket {self.bucket}")

    async def current(self, name: str) -> Manifest | None:
        """What says who may read the dataset now: the published manifest (shared by every instance of the
        service), else the local one."""
        return await self.published(name) or self.local(name)

    async def publish(self, manifest: Manifest) -> None:
        options = ObjectMetaOptions(max_chunk_size=self.chunk_bytes)
        for file, _ in manifest.files_to_fetch():
            with open(self.file(manifest, file), "rb") as f:
                await self._objects.put(self._object(manifest.name, file), f, meta=ObjectMeta(options=options))
        await self._put_manifest(manifest)

    async def share(self, manifest: Manifest, public: bool) -> Manifest:
        """The dataset, public or private from now on: its manifest rewritten here and in the bucket."""
        shared = manifest.model_copy(update={"public": public})
        if self.local(manifest.name):
            _write_manifest(self.path(manifest.name), shared)
        await self._put_manifest(shared)
        return shared

    async def _put_manifest(self, manifest: Manifest) -> None:
        await self._objects.put(self._object(manifest.name, MANIFEST_FILE), manifest.model_dump_json(indent=1).encode())

    async def all_published(self) -> list[Manifest]:
        try:
            infos = await self._objects.list()
        except NotFoundError:  # an empty bucket
            return []
        out = []
        for info in infos:
            if info.name.endswith(f"/{MANIFEST_FILE}") and not info.deleted:
                try:
                    manifest = await self.published(info.name.rsplit("/", 1)[0])
                except DatasetUserError as exc:  # one damaged manifest does not hide the others
                    log.warning("%s", exc)
                    continue
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
                target = confined(staging, file, f"dataset {name!r}")
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


def _manifest(name: str, data: bytes, where: str) -> Manifest:
    """The manifest of dataset `name`; a `DatasetUserError` when it is not a valid one, or another dataset's."""
    try:
        manifest = Manifest.model_validate_json(data)
    except ValidationError as exc:
        error = exc.errors()[0]
        at = ".".join(str(p) for p in error["loc"])
        raise DatasetUserError(f"dataset {name!r}: its manifest {where} is not valid ({at}: {error['msg']}); "
                               "the dataset is damaged or forged: recreate it") from None
    if manifest.name != name:
        raise DatasetUserError(f"dataset {name!r}: its manifest {where} is dataset {manifest.name!r}'s; "
                               "the dataset is damaged or forged: recreate it")
    return manifest


def _write_manifest(folder: Path, manifest: Manifest) -> None:
    """Replaced whole, so a reader never sees half of one."""
    tmp = folder / f".{MANIFEST_FILE}.tmp"
    tmp.write_text(manifest.model_dump_json(indent=1))
    tmp.replace(folder / MANIFEST_FILE)


def _file_digest(path: Path) -> str:
    h = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
