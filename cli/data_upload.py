"""The files a user names, as the dataset service gets them: paths it reads as they are, uploads for the rest.

Whether the client is "on the service's host" is the service's answer to `ca.ds.locate`: a path
counts when the service finds the same bytes at it, inside its data roots. That holds on the same
machine, in a container with the folder mounted, on a shared file system; a file anywhere else,
or outside the service's roots, travels through the Object Store (`protocol.uploads`: in parts,
digested, a retry resumes), into the user's own uploads bucket, which the service makes on the
client's first `uploads` request. Folders are expanded here by the service's own rule, so an uploaded
folder is the folder the service would have read. Every file's size is checked before it is read.
"""

from __future__ import annotations

import asyncio
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import nats.errors

from computeall.protocol.config import SessionConfig
from computeall.protocol.data_files import folder_files
from computeall.protocol.dataset_api import LocalFile, LocateFiles
from computeall.protocol.dataset_client import DatasetError, locate_files, open_uploads
from computeall.protocol.limits import DATA_FILES_PER_REQUEST, UPLOAD_FILE_BYTES
from computeall.protocol.subjects import Subjects
from computeall.protocol.uploads import UploadedFile, UploadError, manifest_of, upload

from .client import Client
from .errors import UserError


@dataclass(frozen=True)
class SentData:
    files: list[str]  # paths the service reads as they are
    uploads: list[UploadedFile]
    uploaded_bytes: int  # sent now (parts already in the bucket are not sent again)


def expand(paths: list[str]) -> list[Path]:
    """Each named file, and the text files inside each named folder; a `UserError` for a path that is not
    there or a file over the size limit (told by its size alone, before anything reads it)."""
    files: list[Path] = []
    for name in paths:
        path = Path(name).resolve()
        if path.is_dir():
            text, _ = folder_files(path)
            if not text:
                raise UserError(f"{name}: the folder holds no non-empty text files")
            files += text
        elif path.is_file():
            files.append(path)
        else:
            raise UserError(f"data not found: {name}")
    for path in files:
        _check_size(path)
    return files


def _check_size(path: Path) -> None:
    size = path.stat().st_size
    if size > UPLOAD_FILE_BYTES:
        raise UserError(f"{path}: {size:,} bytes, more than the {UPLOAD_FILE_BYTES:,} one file of a dataset may hold "
                        "(the dataset service holds a file whole while it reads it); split it into smaller files")


async def send_files(nc, subjects: Subjects, user: str, paths: list[str], progress: bool = True,
                     wait_s: float = 60.0) -> SentData:
    """Ask the service which files it reads as they are, upload the others into `user`'s bucket; `wait_s`
    for the service to come up."""
    files = expand(paths)
    manifests = {p: await asyncio.to_thread(manifest_of, p) for p in files}
    local = [LocalFile(path=str(p), sha256=m.sha256, size=m.size) for p, m in manifests.items()]
    readable: set[str] = set()
    for start in range(0, len(local), DATA_FILES_PER_REQUEST):
        request = LocateFiles(files=local[start:start + DATA_FILES_PER_REQUEST])
        readable.update(await _locate(nc, subjects, user, request, wait_s))
    missing = [p for p in files if str(p) not in readable]
    uploads, sent = [], 0
    if missing:
        try:
            bucket = await open_uploads(nc, subjects, user, timeout=60.0)
        except DatasetError as exc:
            raise UserError(str(exc)) from None
        store = await nc.jetstream().object_store(bucket)
        bar = _bar(sum(manifests[p].size for p in missing), progress)
        try:
            for path in missing:
                try:
                    report = await upload(store, path, manifests[path], progress=bar.update)
                except UploadError as exc:
                    raise UserError(str(exc)) from None
                uploads.append(report.file)
                sent += report.bytes_sent
        finally:
            bar.close()
    return SentData([str(p) for p in files if str(p) in readable], uploads, sent)


async def with_sent_data(client: Client, config: SessionConfig, progress: bool = True) -> SessionConfig:
    """`config` with its data files as the dataset service gets them (a config naming a dataset is unchanged)."""
    if not config.data.files:
        return config
    sent = await send_files(client.nc, client.subjects, client.user, config.data.files, progress)
    data = config.data.model_copy(update={"files": sent.files, "uploads": sent.uploads})
    return config.model_copy(update={"data": data})


async def _locate(nc, subjects: Subjects, user: str, request: LocateFiles, wait_s: float) -> list[str]:
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return await locate_files(nc, subjects, user, request, timeout=600.0)  # it hashes what it finds
        except DatasetError as exc:
            raise UserError(str(exc)) from None
        except nats.errors.NoRespondersError:
            if time.monotonic() > deadline:
                raise UserError(f"no dataset service answered for {wait_s:.0f}s; is it running? (`computeall status`)") from None
            await asyncio.sleep(0.3)


def _bar(total: int, enabled: bool):
    from tqdm import tqdm

    return tqdm(total=total, desc="upload", unit="B", unit_scale=True, disable=not enabled, file=sys.stderr)
