"""Files a client gives the dataset service through the JetStream Object Store, resumably.

A client whose files the dataset service cannot read as they are (another machine, or a path
outside the service's data roots: `locate` says which) uploads them to its own bucket
`<prefix>-uploads-<user>` (`object_store.uploads_bucket`), which the dataset service creates (`uploads`)
and only that user and the service may read:

    parts/<sha256 of the part>   at most `PART_BYTES` of the file (the Object Store chunks it further)
    files/<sha256 of the file>   the file's `UploadManifest`, put last: the upload is complete

Parts are named by their content, so a retried upload skips every part already there and goes on
where it stopped, and a file sent before is not sent again. A request then names the file by an
`UploadedFile`; the dataset service fetches it with `fetch`, which checks every part and the whole
file against their digests (a part that does not match is deleted, so the next upload sends it).
"""

from __future__ import annotations

import asyncio
import hashlib
import io
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from nats.js.api import ObjectMeta, ObjectMetaOptions
from nats.js.errors import DigestMismatchError, NotFoundError, ObjectNotFoundError
from nats.js.object_store import ObjectStore
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from .dataset_names import RESERVED_FILE_NAMES
from .limits import UPLOAD_FILE_BYTES

PART_BYTES = 8 << 20
CHUNK_BYTES = 256 << 10  # the Object Store's message size: well below the default max_payload of 1 MiB
SHA256 = r"^[0-9a-f]{64}$"


class UploadError(RuntimeError):
    """An upload is missing or does not match its digests; the message says what to do."""


class UploadedFile(BaseModel):
    """A file in the uploads bucket, as a session or dataset request names it."""

    model_config = ConfigDict(extra="forbid")

    # one plain name: no folder, and no leading dot (so never "." or "..", which would name a folder)
    name: str = Field(..., pattern=r"^[^./\\\x00][^/\\\x00]{0,254}$",
                      description="the file's own name, without folders; its suffix says how it is read (.jsonl)")
    sha256: str = Field(..., pattern=SHA256, description="of the whole file, hex")
    size: int = Field(..., ge=1, le=UPLOAD_FILE_BYTES)

    @field_validator("name")
    @classmethod
    def _not_reserved(cls, value: str) -> str:
        if value in RESERVED_FILE_NAMES:
            raise ValueError(f"{value} is the name of the dataset service's own files; upload it under another name")
        return value


class UploadManifest(BaseModel):
    """`files/<sha256>`: the parts of one uploaded file, in order."""

    model_config = ConfigDict(extra="forbid")

    sha256: str = Field(..., pattern=SHA256)
    size: int = Field(..., ge=1, le=UPLOAD_FILE_BYTES)
    part_bytes: int = Field(..., ge=1 << 16, le=64 << 20, description="every part but the last has this size")
    parts: list[str] = Field(..., description="sha256 of each part, hex")

    @model_validator(mode="after")
    def _parts_cover_the_file(self) -> "UploadManifest":
        if len(self.parts) != -(-self.size // self.part_bytes):
            raise ValueError(f"{len(self.parts)} parts of {self.part_bytes} bytes cannot hold {self.size} bytes")
        return self

    def part_size(self, index: int) -> int:
        return min(self.part_bytes, self.size - index * self.part_bytes)


def part_object(digest: str) -> str:
    return f"parts/{digest}"


def file_object(sha256: str) -> str:
    return f"files/{sha256}"


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def manifest_of(path: Path, part_bytes: int = PART_BYTES) -> UploadManifest:
    """The file's digests, whole and per part, in one pass (blocking: run it in a thread)."""
    whole, parts, size = hashlib.sha256(), [], 0
    with open(path, "rb") as f:
        for part in iter(lambda: f.read(part_bytes), b""):
            whole.update(part)
            parts.append(hashlib.sha256(part).hexdigest())
            size += len(part)
    return UploadManifest(sha256=whole.hexdigest(), size=size, part_bytes=part_bytes, parts=parts)


@dataclass(frozen=True)
class UploadReport:
    file: UploadedFile
    parts_sent: int
    parts_found: int  # already in the bucket: sent by an earlier, interrupted try (or another file)
    bytes_sent: int


async def upload(store: ObjectStore, path: Path, manifest: UploadManifest | None = None,
                 progress: Callable[[int], None] = lambda n: None) -> UploadReport:
    """Put `path` into the uploads bucket, sending only the parts not there yet; `progress(bytes)` per part.
    `manifest` is `manifest_of(path)` when the caller has it already."""
    manifest = manifest or await asyncio.to_thread(manifest_of, path)
    part_bytes = manifest.part_bytes
    try:
        file = UploadedFile(name=path.name.lstrip(".") or "file", sha256=manifest.sha256, size=manifest.size)
    except ValidationError as exc:
        raise UploadError(f"{path}: {exc.errors()[0]['msg'].removeprefix('Value error, ')}") from None
    sent = sent_bytes = 0  # every part is looked for, even of a file sent before: one may have been removed
    with open(path, "rb") as f:
        for index, digest in enumerate(manifest.parts):
            size = manifest.part_size(index)
            if not await _present(store, part_object(digest), size):
                f.seek(index * part_bytes)
                data = await asyncio.to_thread(f.read, size)
                if await asyncio.to_thread(lambda: hashlib.sha256(data).hexdigest()) != digest:
                    raise UploadError(f"{path} changed while it was being uploaded; upload it again")
                meta = ObjectMeta(options=ObjectMetaOptions(max_chunk_size=CHUNK_BYTES))
                await store.put(part_object(digest), data, meta=meta)
                sent += 1
                sent_bytes += size
            progress(size)
    await store.put(file_object(manifest.sha256), manifest.model_dump_json().encode())
    return UploadReport(file, sent, len(manifest.parts) - sent, sent_bytes)


async def fetch(store: ObjectStore, file: UploadedFile, out: BinaryIO) -> None:
    """Write the uploaded `file` into `out`, every part checked; `UploadError` says what is wrong."""
    again = _again(file)
    manifest = await _record(store, file, again)
    whole = hashlib.sha256()
    for index, digest in enumerate(manifest.parts):
        data = await _part(store, digest, manifest.part_size(index), f"part {index + 1} of {file.name}", again)
        whole.update(data)
        await asyncio.to_thread(out.write, data)
    if whole.hexdigest() != file.sha256:
        raise UploadError(f"{file.name} does not match its sha256 once its parts are joined; {again}")


async def check_complete(store: ObjectStore, file: UploadedFile) -> None:
    """`UploadError` unless the uploaded `file`'s record and every part of the size it names are in `store`:
    what `fetch` needs, looked at without reading the parts (their digests are checked when fetched)."""
    again = _again(file)
    manifest = await _record(store, file, again)
    for index, digest in enumerate(manifest.parts):
        if not await _present(store, part_object(digest), manifest.part_size(index)):
            raise UploadError(f"part {index + 1} of {file.name} is missing from the uploads bucket; {again}")


def _again(file: UploadedFile) -> str:
    return f"upload {file.name} again (`computeall dataset create --files` and `session create --data` do)"


async def _record(store: ObjectStore, file: UploadedFile, again: str) -> UploadManifest:
    """The upload record of `file` (`files/<sha256>`), which is put last: it says the upload is complete."""
    try:
        manifest = UploadManifest.model_validate_json((await store.get(file_object(file.sha256))).data)
    except (ObjectNotFoundError, NotFoundError):
        raise UploadError(f"{file.name} (sha256 {file.sha256[:12]}...) is not in the uploads bucket; {again}") from None
    except ValidationError as exc:
        raise UploadError(f"the upload record of {file.name} is not valid ({exc.errors()[0]['msg']}); {again}") from None
    if (manifest.sha256, manifest.size) != (file.sha256, file.size):
        raise UploadError(f"the upload record of {file.name} names another file; {again}")
    return manifest


async def _part(store: ObjectStore, digest: str, size: int, what: str, again: str) -> bytes:
    buffer = io.BytesIO()
    try:
        await store.get(part_object(digest), writeinto=buffer)
    except (ObjectNotFoundError, NotFoundError):
        raise UploadError(f"{what} is missing from the uploads bucket; {again}") from None
    except DigestMismatchError:
        buffer = None
    data = buffer.getvalue() if buffer else b""
    if len(data) != size or await asyncio.to_thread(lambda: hashlib.sha256(data).hexdigest()) != digest:
        await store.delete(part_object(digest))  # so that the next upload sends it again
        raise UploadError(f"{what} does not match its digest (it was removed); {again}")
    return data


async def _present(store: ObjectStore, name: str, size: int) -> bool:
    try:
        info = await store.get_info(name)
    except (ObjectNotFoundError, NotFoundError):
        return False
    return info.size == size
