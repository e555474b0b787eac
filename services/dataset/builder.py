"""Building a dataset: scan -> tokenizer -> tokenize -> cut splits -> shards -> manifest.

Runs in a worker thread (the Rust parts release the GIL) and writes only into a
staging folder the caller owns; the caller renames it into place on success and
deletes it on failure, so a failed create leaves nothing behind.
"""

from __future__ import annotations

import hashlib
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from computeall.protocol.dataset_api import CreateDataset

from . import splits, tokenizer as bpe
from .errors import DatasetUserError
from .manifest import TOKENIZER_FILE, Manifest, SplitInfo, TokenizerInfo
from .shards import ShardWriter
from .sources import Reader, Scan

Progress = Callable[[str, int, int, str], None]  # stage, done, total, unit

_ENCODE_CHUNK_BYTES = 4 << 20  # big enough to keep every core busy in encode_batch, small enough to stay lean
_STREAM_FILE = "all-tokens.tmp"


@dataclass
class BuildResult:
    manifest: Manifest
    train_seconds: float
    tokenize_seconds: float


def recipe_digest(request: CreateDataset, scan: Scan, tokenizer_digest: str | None) -> str:
    """Same inputs and settings -> same digest: what `if_exists="reuse"` compares."""
    settings = request.model_dump(include={"vocab_size", "split", "jsonl_field", "document_unit", "on_invalid_utf8", "seed", "shard_tokens"})
    text = repr((sorted(settings.items()), scan.content_digest, tokenizer_digest))
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


def build(
    request: CreateDataset,
    owner: str,
    scan: Scan,
    reader: Reader,
    staging: Path,
    progress: Progress,
    tokenizer_from: tuple[str, Path] | None = None,
) -> BuildResult:
    """Everything of `owner`'s new dataset into `staging`; `tokenizer_from` is (where it comes from, the tokenizer file)."""
    started = time.monotonic()
    tokenizer_path = staging / TOKENIZER_FILE
    if tokenizer_from:
        shutil.copyfile(tokenizer_from[1], tokenizer_path)
        tokenizer = bpe.load(tokenizer_path)
    else:
        done = 0

        def fed(n: int) -> None:
            nonlocal done
            done += n
            progress("train-tokenizer", done, scan.text_bytes, "B")

        tokenizer = bpe.train(reader.documents(scan.files), request.vocab_size, scan.documents, fed)
        tokenizer.save(str(tokenizer_path))
        progress("train-tokenizer", scan.text_bytes, scan.text_bytes, "B")
    trained = time.monotonic()

    vocab_size = tokenizer.get_vocab_size()
    dtype = bpe.token_dtype(vocab_size)
    eot = bpe.eot_id(tokenizer)
    stream_path = staging / _STREAM_FILE
    lengths, fractions = tokenize_corpus(tokenizer, reader.documents(scan.files), scan, dtype, eot, stream_path, request, progress)
    tokenized = time.monotonic()

    mask = splits.held_out(request.split, lengths, fractions, request.seed)
    split_infos = _write_splits(staging, stream_path, lengths, mask, dtype, request, progress)
    stream_path.unlink()

    tokenizer_digest = bpe.file_digest(tokenizer_path)
    manifest = Manifest(
        name=request.name,
        owner=owner,
        created_at=time.time(),
        files=[str(f.path) for f in scan.files],
        documents=scan.documents,
        text_bytes=scan.text_bytes,
        vocab_size=vocab_size,
        requested_vocab_size=vocab_size if tokenizer_from else request.vocab_size,  # a reused tokenizer ignores the request
        dtype=dtype,
        shard_tokens=request.shard_tokens,
        split=request.split,
        seed=request.seed,
        recipe_digest=recipe_digest(request, scan, tokenizer_from and bpe.file_digest(tokenizer_from[1])),
        tokenizer=TokenizerInfo(
            digest=tokenizer_digest,
            vocab_size=vocab_size,
            eot_id=eot,
            trained=tokenizer_from is None,
            tokenizer_from=tokenizer_from[0] if tokenizer_from else None,
        ),
        splits=split_infos,
        skipped_invalid_utf8=scan.skipped_invalid_utf8,
        skipped_files=scan.skipped_binary_files,
    )
    return BuildResult(manifest, trained - started, tokenized - trained)


def _chunks(documents: Iterator[str]) -> Iterator[list[str]]:
    chunk: list[str] = []
    size = 0
    for doc in documents:
        chunk.append(doc)
        size += len(doc)
        if size >= _ENCODE_CHUNK_BYTES:
            yield chunk
            chunk, size = [], 0
    if chunk:
        yield chunk


def tokenize_corpus(tokenizer, documents, scan: Scan, dtype: str, eot: int, path: Path, request: CreateDataset, progress: Progress):
    """The whole corpus into one temporary token stream, plus per-document lengths (and hashes for hash-doc)."""
    lengths: list[np.ndarray] = []
    fractions: list[float] | None = [] if request.split.method == "hash-doc" else None
    done = 0
    with open(path, "wb") as out:
        for chunk in _chunks(documents):
            ids, chunk_lengths = bpe.encode_documents(tokenizer, chunk, dtype, eot)
            out.write(ids.tobytes())
            lengths.append(chunk_lengths)
            if fractions is not None:
                fractions.extend(splits.hash_fraction(doc) for doc in chunk)
            done += sum(len(doc.encode()) for doc in chunk)
            progress("tokenize", done, scan.text_bytes, "B")
    all_lengths = np.concatenate(lengths)
    if len(all_lengths) != scan.documents:
        raise DatasetUserError("the input files changed while the dataset was being built; try again")
    return all_lengths, (np.asarray(fractions) if fractions is not None else None)


def _write_splits(staging: Path, stream_path: Path, lengths: np.ndarray, mask: np.ndarray, dtype: str, request: CreateDataset, progress: Progress) -> dict[str, SplitInfo]:
    """Copy runs of consecutive documents of one split from the stream into that split's shards, in corpus order."""
    stream = np.memmap(stream_path, dtype=np.dtype(dtype).newbyteorder("<"), mode="r")
    ends = np.cumsum(lengths)
    starts = ends - lengths
    names = {False: "train", True: request.split.name}
    writers = {flag: ShardWriter(staging, name, dtype, request.shard_tokens) for flag, name in names.items()}
    run_edges = np.flatnonzero(np.diff(mask.astype(np.int8))) + 1
    run_starts = np.concatenate([[0], run_edges])
    run_ends = np.concatenate([run_edges, [len(mask)]])
    for first, last in zip(run_starts, run_ends):
        writers[bool(mask[first])].write(stream[starts[first] : ends[last - 1]])
        progress("write-splits", int(ends[last - 1]), int(ends[-1]), "tok")
    out = {}
    for flag, name in names.items():
        shards = writers[flag].close()
        out[name] = SplitInfo(
            name=name,
            documents=int((mask == flag).sum()),
            tokens=int(lengths[mask == flag].sum()),
            shards=shards,
        )
    return out
