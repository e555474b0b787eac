"""The dataset service: the handlers of `dataset_api.API`, on `ca.ds.user.<user>.<verb>` and
`ca.ds.pnode.<pid>.batch`, in a queue group. Who asks is read from the subject (`dataset_api.requester_of`);
what they may read is `access.py`'s rule, checked by every handler that reads a dataset.

Each request runs as its own task (`Responder(concurrent=True)`), so a create that trains a tokenizer
for minutes never delays a batch; the heavy parts run in threads. A `DatasetUserError` is answered as
it stands, any other failure as a `DatasetReply(ok=False, error=...)`: the service never dies on a message.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from computeall.protocol import wire
from computeall.protocol.dataset_api import (
    API,
    BatchRequest,
    CheckData,
    CreateDataset,
    DatasetReply,
    DecodeTokens,
    EncodePrompts,
    GetDataset,
    ListDatasets,
    LocateFiles,
    OpenUploads,
    Requester,
    SampleRequest,
    ShareDataset,
)
from computeall.protocol.envelope import Envelope
from computeall.protocol.events import DatasetShared
from computeall.protocol.prompts import PromptCodec
from computeall.protocol.eventlog import EventLog
from computeall.protocol.responder import Responder
from computeall.protocol.subjects import Subjects
from computeall.protocol.uploads import sha256_of

from . import builder, tokenizer as bpe
from .access import Access
from .batches import make_batch
from .creation_events import creation_events
from .data_roots import DataRoots
from .errors import DatasetUserError
from .manifest import Manifest
from .progress import ProgressReporter
from .shards import SplitStream
from .sources import Reader
from .store import DatasetStore
from .tokenizer_source import tokenizer_source
from .uploads import UploadCache

log = logging.getLogger(__name__)

QUEUE_GROUP = "dataset"
ACTOR = "dataset-service"


@dataclass
class _Open:
    """A dataset ready to serve: its manifest and memory-mapped splits."""

    manifest: Manifest
    store: DatasetStore
    streams: dict[str, SplitStream] = field(default_factory=dict)
    _codec: PromptCodec | None = None

    def codec(self) -> PromptCodec:
        """The dataset's tokenizer, loaded on first use."""
        if self._codec is None:
            self._codec = PromptCodec(bpe.load(self.store.file(self.manifest, self.manifest.tokenizer.file)))
        return self._codec

    def stream(self, split: str) -> SplitStream:
        if split not in self.manifest.splits:
            raise DatasetUserError(
                f"dataset {self.manifest.name!r} has no split {split!r}; its splits are {', '.join(self.manifest.splits)}"
            )
        if split not in self.streams:
            self.streams[split] = SplitStream(self.store.path(self.manifest.name), self.manifest.splits[split], self.manifest.dtype)
        return self.streams[split]


class DatasetService:
    def __init__(self, nc, subjects: Subjects, store: DatasetStore, roots: DataRoots, uploads: UploadCache) -> None:
        self.nc = nc
        self.subjects = subjects
        self.store = store
        self.roots = roots
        self.uploads = uploads
        self.events = EventLog(nc.jetstream(), subjects)
        self.access = Access(store, nc.jetstream(), subjects)
        self._open: dict[str, _Open] = {}
        self._creating: dict[str, asyncio.Event] = {}  # name -> set when its creation ends
        self.responder = Responder(nc, subjects, API, {
            "create": self.create, "get": self.get, "check": self.check, "list": self.list_datasets, "share": self.share,
            "batch": self.batch, "sample": self.sample, "locate": self.locate, "uploads": self.open_uploads,
            "encode": self.encode, "decode": self.decode,
        }, concurrent=True, queue=QUEUE_GROUP, refusals=(DatasetUserError,))

    async def start(self) -> None:
        await self.responder.start()

    async def stop(self) -> None:
        """Stop taking requests and let the ones in flight answer."""
        await self.responder.stop()

    # -- handlers ------------------------------------------------------------
    async def create(self, request: CreateDataset, asker: Requester) -> DatasetReply:
        while request.name in self._creating:
            if request.if_exists != "reuse":
                raise DatasetUserError(f"dataset {request.name!r} is being created right now; wait for it or choose another name")
            await self._creating[request.name].wait()  # then reuse what it made, if it is the same recipe
        done = self._creating[request.name] = asyncio.Event()
        try:
            return await self._create(request, asker.name)
        finally:
            del self._creating[request.name]
            done.set()

    async def _create(self, request: CreateDataset, owner: str) -> DatasetReply:
        """`owner`'s new dataset, from files in the data roots and `owner`'s own uploads."""
        reader = Reader(request.jsonl_field, request.document_unit, request.on_invalid_utf8)
        for name in request.files:
            self.roots.check(name)  # refused before any upload is fetched
        uploaded = [await self.uploads.local(owner, u) for u in request.uploads]
        readable = self.roots.including([path.parent for path in uploaded])  # just these uploads
        scan = await asyncio.to_thread(reader.scan, [*request.files, *map(str, uploaded)], readable)
        tokenizer_from = await tokenizer_source(request, owner, self.store, self.roots, self.uploads)

        existing = await self.store.current(request.name)
        if existing:
            recipe = builder.recipe_digest(request, scan, tokenizer_from and bpe.file_digest(tokenizer_from[1]))
            if request.if_exists == "reuse" and existing.recipe_digest == recipe and existing.readable_by(owner):
                return DatasetReply(ok=True, dataset=existing.model_dump())
            differs = " with other inputs or settings" if request.if_exists == "reuse" else ""
            raise DatasetUserError(f"dataset {request.name!r} already exists{differs}; choose another name")

        reporter = ProgressReporter(self.nc, self.subjects, owner, request.name, asyncio.get_running_loop())
        staging = self.store.staging()
        try:
            result = await asyncio.to_thread(builder.build, request, owner, scan, reader, staging, reporter, tokenizer_from)
            self.store.commit(staging, result.manifest)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        finally:
            reporter.close()
        manifest = result.manifest
        try:
            if await self.store.published(manifest.name):  # another instance finished the same name first
                raise DatasetUserError(f"dataset {manifest.name!r} was created by another dataset service meanwhile; choose another name")
            await self.store.publish(manifest)
        except BaseException:
            shutil.rmtree(self.store.path(manifest.name), ignore_errors=True)
            raise
        await self._record(manifest, result)
        log.info("created dataset %s: %d documents, vocab %d, %s", manifest.name, manifest.documents, manifest.vocab_size,
                 ", ".join(f"{s.name} {s.tokens} tokens" for s in manifest.splits.values()))
        return DatasetReply(ok=True, dataset=manifest.model_dump())

    async def _record(self, manifest: Manifest, result: builder.BuildResult) -> None:
        for event in creation_events(manifest, result, self.store.bucket):
            await self.events.append_event(self.subjects.dataset_evt(manifest.name, event.type), Envelope(actor=ACTOR, payload=event))

    async def check(self, request: CheckData, asker: Requester) -> DatasetReply:
        """Whether `asker`'s session could be prepared from this data, without preparing it (`CheckData`)."""
        data = request.data
        if data.dataset:
            manifest = await self.access.check(asker, data.dataset)
            if data.split not in manifest.splits:
                raise DatasetUserError(f"dataset {data.dataset!r} has no split {data.split!r}; it has "
                                       f"{', '.join(sorted(manifest.splits))}")
        for name in data.files:
            if not os.access(self.roots.check(name), os.R_OK):
                raise DatasetUserError(f"{name}: not found, or not readable, on the dataset service's machine")
        for upload in data.uploads:
            await self.uploads.check(asker.name, upload)
        return DatasetReply(ok=True)

    async def get(self, request: GetDataset, asker: Requester) -> DatasetReply:
        manifest = await self.access.check(asker, request.name)
        await self._dataset(request.name)  # fetched here when it is not yet
        return DatasetReply(ok=True, dataset=manifest.model_dump())

    async def list_datasets(self, request: ListDatasets, asker: Requester) -> DatasetReply:
        """The asker's datasets and the public ones (published, or only here: made before a bucket held them)."""
        found = {m.name: m for m in await self.store.all_published()}
        for folder in sorted(self.store.root.iterdir()):
            if folder.name.startswith(".") or folder.name in found:
                continue
            try:
                manifest = self.store.local(folder.name)
            except DatasetUserError as exc:  # one damaged dataset does not hide the others
                log.warning("%s", exc)
                continue
            if manifest:
                found[manifest.name] = manifest
        mine = [found[name].model_dump() for name in sorted(found) if found[name].readable_by(asker.name)]
        return DatasetReply(ok=True, datasets=mine)

    async def share(self, request: ShareDataset, asker: Requester) -> DatasetReply:
        manifest = await self.store.share(await self.access.owned(asker.name, request.name), request.public)
        event = DatasetShared(name=manifest.name, owner=manifest.owner, public=manifest.public)
        await self.events.append_event(self.subjects.dataset_evt(manifest.name, event.type), Envelope(actor=asker.name, payload=event))
        log.info("%s made dataset %s %s", asker.name, manifest.name, "public" if manifest.public else "private")
        return DatasetReply(ok=True, dataset=manifest.model_dump())

    async def open_uploads(self, request: OpenUploads, asker: Requester) -> DatasetReply:
        return DatasetReply(ok=True, bucket=await self.uploads.open(asker.name))

    async def batch(self, request: BatchRequest, asker: Requester) -> bytes:
        await self.access.check(asker, request.dataset, request.session_id)
        dataset = await self._dataset(request.dataset)
        tokens = make_batch(dataset.stream(request.split), request, f"{request.dataset}/{request.split}")
        key = f"{request.dataset}/{request.split}/{request.seed}/{request.step}/{request.micro}"
        frames = wire.encode(key, dataset.manifest.dtype, tokens.shape, tokens.data, chunk_bytes=self.nc.max_payload)
        if len(frames) > 1:
            raise DatasetUserError(
                f"a batch of {request.batch}x{request.context + 1} {dataset.manifest.dtype} tokens ({tokens.nbytes} bytes) "
                f"does not fit in one message (max_payload {self.nc.max_payload}); ask for a smaller batch or context"
            )
        return frames[0]

    async def sample(self, request: SampleRequest, asker: Requester) -> DatasetReply:
        await self.access.check(asker, request.dataset)
        dataset = await self._dataset(request.dataset)
        batch_request = BatchRequest(dataset=request.dataset, split=request.split, seed=request.seed, step=0, batch=request.n, context=request.context)
        tokens = make_batch(dataset.stream(request.split), batch_request, f"{request.dataset}/{request.split}")
        texts = [dataset.codec().tokenizer.decode(row.tolist(), skip_special_tokens=False) for row in tokens]
        return DatasetReply(ok=True, samples=texts)

    async def locate(self, request: LocateFiles, asker: Requester) -> DatasetReply:
        """The paths this service reads with the bytes the client has; outside the roots a path is never looked at."""
        readable = []
        for file in request.files:
            path = Path(file.path)
            if not path.is_absolute() or not self.roots.holds(path):
                continue
            real = Path(os.path.realpath(path))
            try:
                same = real.is_file() and real.stat().st_size == file.size and await asyncio.to_thread(sha256_of, real) == file.sha256
            except OSError:  # unreadable here: the client uploads it
                same = False
            if same:
                readable.append(file.path)
        return DatasetReply(ok=True, readable=readable)

    async def encode(self, request: EncodePrompts, asker: Requester) -> DatasetReply:
        await self.access.check(asker, request.dataset)
        codec = await asyncio.to_thread((await self._dataset(request.dataset)).codec)
        tokens = await asyncio.to_thread(lambda: [codec.prompt(t) for t in request.texts])
        return DatasetReply(ok=True, tokens=tokens, eot_id=codec.eot, vocab_size=codec.tokenizer.get_vocab_size())

    async def decode(self, request: DecodeTokens, asker: Requester) -> DatasetReply:
        await self.access.check(asker, request.dataset)
        codec = await asyncio.to_thread((await self._dataset(request.dataset)).codec)
        return DatasetReply(ok=True, texts=await asyncio.to_thread(lambda: [codec.text(ids) for ids in request.tokens]))

    async def _dataset(self, name: str) -> _Open:
        """The dataset ready to serve; who may read it is checked before (`access`)."""
        if name not in self._open:
            manifest = await self.store.find(name)
            if manifest is None:
                raise DatasetUserError(f"no dataset named {name!r}; `computeall dataset list` shows them, `computeall dataset create` makes one")
            self._open[name] = _Open(manifest, self.store)
        return self._open[name]

