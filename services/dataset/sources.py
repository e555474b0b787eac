"""Input files -> documents: text files, folders (recursive) and JSONL, checked before any work.

`scan` runs first and fails fast on a user mistake (missing path, empty or binary
file, invalid UTF-8, bad JSONL) before minutes go into training a tokenizer.
`documents` then streams the same documents again as often as the build needs
them, so the corpus is never held in memory as a whole.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from computeall.protocol.data_files import binary_at, folder_files
from computeall.protocol.limits import UPLOAD_FILE_BYTES

from .data_roots import DataRoots
from .errors import DatasetUserError

log = logging.getLogger(__name__)

_PARAGRAPHS = re.compile(rb"\n(?:[ \t\r]*\n)+")


@dataclass
class SourceFile:
    path: Path
    jsonl: bool
    size: int


@dataclass
class Scan:
    files: list[SourceFile]
    documents: int
    text_bytes: int
    content_digest: str  # over every file's path-independent content, in order
    skipped_invalid_utf8: int = 0
    skipped_binary_files: list[str] = field(default_factory=list)


@dataclass
class Reader:
    """How to cut files into documents; the same settings for the scan and every later pass."""

    jsonl_field: str = "text"
    document_unit: Literal["paragraph", "file"] = "paragraph"
    on_invalid_utf8: Literal["error", "skip"] = "error"

    def documents(self, files: list[SourceFile]) -> Iterator[str]:
        for source in files:
            yield from (doc for doc, bad in self._file_documents(source) if not bad)

    def scan(self, paths: list[str], roots: DataRoots) -> Scan:
        """`paths` must lie inside `roots` (files found in folders too: a link out of them is skipped)."""
        files, skipped_binary = _expand(paths, roots)
        digest = hashlib.blake2b(digest_size=16)
        documents = text_bytes = skipped = 0
        for source in files:
            digest.update(source.path.read_bytes())
            digest.update(b"\0")
            count = 0
            for doc, bad in self._file_documents(source):
                if bad:
                    skipped += 1
                    continue
                count += 1
                text_bytes += len(doc.encode())
            if count == 0 and not skipped:
                raise DatasetUserError(f"{source.path}: no text in it (only blank lines or empty documents); remove it")
            documents += count
        if documents == 0:
            raise DatasetUserError(
                f"no documents left in {', '.join(paths)}: all {skipped} had invalid UTF-8; re-encode the files as UTF-8"
            )
        return Scan(files, documents, text_bytes, digest.hexdigest(), skipped, skipped_binary)

    def _file_documents(self, source: SourceFile) -> Iterator[tuple[str, bool]]:
        """(document, skipped-for-invalid-UTF-8) pairs; skipped ones come as ("", True) and only in skip mode."""
        raw = source.path.read_bytes()
        if source.jsonl:
            yield from self._jsonl_documents(source.path, raw)
        elif self.document_unit == "file":
            text = self._decode(source.path, raw, 0)
            if text is None:
                yield "", True
            elif text.strip():
                yield text, False
        else:
            offset = 0
            for match in [*_PARAGRAPHS.finditer(raw), None]:
                end = match.start() if match else len(raw)
                chunk = raw[offset:end]
                text = self._decode(source.path, chunk, offset)
                if text is None:
                    yield "", True
                elif text.strip():
                    yield text, False
                offset = match.end() if match else len(raw)

    def _jsonl_documents(self, path: Path, raw: bytes) -> Iterator[tuple[str, bool]]:
        offset = 0
        for number, line in enumerate(raw.split(b"\n"), start=1):
            start, offset = offset, offset + len(line) + 1
            if not line.strip():
                continue
            text = self._decode(path, line, start)
            if text is None:
                yield "", True
                continue
            try:
                record = json.loads(text)
            except json.JSONDecodeError as exc:
                raise DatasetUserError(f"{path}:{number}: not valid JSON ({exc.msg}); each line must be one JSON object") from None
            value = record.get(self.jsonl_field) if isinstance(record, dict) else None
            if not isinstance(value, str):
                raise DatasetUserError(
                    f"{path}:{number}: no string field {self.jsonl_field!r}; "
                    f"name the text field with --jsonl-field (the line has: {', '.join(record) if isinstance(record, dict) else type(record).__name__})"
                )
            if value.strip():
                yield value, False

    def _decode(self, path: Path, chunk: bytes, offset: int) -> str | None:
        try:
            return chunk.decode("utf-8")
        except UnicodeDecodeError as exc:
            if self.on_invalid_utf8 == "skip":
                return None
            raise DatasetUserError(
                f"{path}: invalid UTF-8 at byte offset {offset + exc.start}; re-encode the file as UTF-8, "
                f"or skip such documents with --skip-invalid-utf8"
            ) from None


def _size(path: Path) -> int:
    """The file's size, checked against the limit before anything reads it (a file is read whole)."""
    size = path.stat().st_size
    if size > UPLOAD_FILE_BYTES:
        raise DatasetUserError(f"{path}: {size:,} bytes, more than the {UPLOAD_FILE_BYTES:,} of one file of a dataset "
                               "(the service holds a file whole while it cuts it into documents); split it into smaller files")
    return size


def _expand(paths: list[str], roots: DataRoots) -> tuple[list[SourceFile], list[str]]:
    """Named files must be text; inside folders, binary, empty and hidden files are skipped (and reported)."""
    files: list[SourceFile] = []
    skipped_binary: list[str] = []
    for name in paths:
        path = roots.check(name)  # before anything else: nothing is said about paths outside
        if not path.exists():
            raise DatasetUserError(f"{name}: no such file or folder (paths are read by the dataset service, on its machine)")
        if path.is_dir():
            text, skipped = folder_files(path)
            inside = [p for p in text if roots.holds(p)]
            skipped_binary += [str(p) for p in skipped] + [str(p) for p in text if p not in inside]
            if not inside:
                raise DatasetUserError(f"{name}: the folder holds no non-empty text files")
            files += [SourceFile(p, p.suffix == ".jsonl", _size(p)) for p in inside]
            continue
        if not os.access(path, os.R_OK):
            raise DatasetUserError(f"{name}: not readable by the dataset service (check its permissions)")
        size = _size(path)
        if size == 0:
            raise DatasetUserError(f"{name}: the file is empty; remove it from the list")
        nul = binary_at(path)
        if nul is not None:
            raise DatasetUserError(f"{name}: looks binary (NUL byte at offset {nul}); give text or JSONL files only")
        files.append(SourceFile(path, path.suffix == ".jsonl", size))
    if skipped_binary:
        log.warning("skipped %d binary, empty or out-of-root files inside folders", len(skipped_binary))
    return files, skipped_binary
