"""Which files of a folder are data, and where the demo's corpus lives: the dataset service and its
clients apply the same rules, so a folder a client uploads file by file is the folder the service
would have read."""

from __future__ import annotations

import sysconfig
from pathlib import Path

SNIFF_BYTES = 8192  # a NUL byte in the first 8 KiB: a binary file


def binary_at(path: Path) -> int | None:
    """The offset of the first NUL byte in the file's head, or None for text."""
    with open(path, "rb") as f:
        head = f.read(SNIFF_BYTES)
    index = head.find(b"\0")
    return index if index >= 0 else None


def folder_files(folder: Path) -> tuple[list[Path], list[Path]]:
    """(text files, skipped binary or empty files) of `folder`, recursively, in name order; hidden ones are left out."""
    found = sorted(p for p in folder.rglob("*") if p.is_file() and not _hidden(p.relative_to(folder)))
    text, skipped = [], []
    for path in found:
        (skipped if path.stat().st_size == 0 or binary_at(path) is not None else text).append(path)
    return text, skipped


def stdlib_root() -> Path:
    """The installed Python standard library: the demo's corpus, and a data root of every dataset service
    (public source that ships with Python, on every machine that runs computeall)."""
    return Path(sysconfig.get_paths()["stdlib"]).resolve()


def _hidden(relative: Path) -> bool:
    return any(part.startswith(".") for part in relative.parts)
