"""Token shard files: fixed-size raw little-endian arrays, written with digests, read memory-mapped.

A split's token stream is its shards in order; every shard holds `shard_tokens`
tokens except the last. Raw arrays (no header) because the manifest carries dtype,
length and digest, and a raw file maps straight into memory.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

from .data_roots import confined
from .manifest import SHARD_DIR, ShardInfo, SplitInfo


class ShardWriter:
    def __init__(self, root: Path, split: str, dtype: str, shard_tokens: int) -> None:
        self.root = root
        self.split = split
        self.dtype = np.dtype(dtype).newbyteorder("<")
        self.shard_tokens = shard_tokens
        self.shards: list[ShardInfo] = []
        self._file = None
        self._hash = None
        self._filled = 0
        (root / SHARD_DIR).mkdir(parents=True, exist_ok=True)

    def write(self, tokens: np.ndarray) -> None:
        data = np.ascontiguousarray(tokens, dtype=self.dtype)
        while len(data):
            if self._file is None:
                self._open()
            take = min(len(data), self.shard_tokens - self._filled)
            raw = data[:take].tobytes()
            self._file.write(raw)
            self._hash.update(raw)
            self._filled += take
            data = data[take:]
            if self._filled == self.shard_tokens:
                self._close_shard()

    def close(self) -> list[ShardInfo]:
        if self._file is not None:
            self._close_shard()
        return self.shards

    def _open(self) -> None:
        self._name = f"{SHARD_DIR}/{self.split}-{len(self.shards):05d}.bin"
        self._file = open(self.root / self._name, "wb")
        self._hash = hashlib.blake2b(digest_size=16)
        self._filled = 0

    def _close_shard(self) -> None:
        self._file.close()
        self.shards.append(
            ShardInfo(file=self._name, tokens=self._filled, bytes=self._filled * self.dtype.itemsize, digest=self._hash.hexdigest())
        )
        self._file = None


class SplitStream:
    """A split's tokens as one logical array over memory-mapped shards."""

    def __init__(self, root: Path, split: SplitInfo, dtype: str) -> None:
        self.dtype = np.dtype(dtype).newbyteorder("<")
        self.maps = [np.memmap(confined(root, s.file, f"split {split.name}"), dtype=self.dtype, mode="r")
                     for s in split.shards if s.tokens]
        self.starts = np.cumsum([0] + [len(m) for m in self.maps])
        self.tokens = int(self.starts[-1])

    def read(self, start: int, length: int) -> np.ndarray:
        """Tokens [start, start+length); a window may span shard boundaries."""
        if start < 0 or start + length > self.tokens:
            raise IndexError(f"tokens [{start}, {start + length}) are outside the split of {self.tokens}")
        index = int(np.searchsorted(self.starts, start, side="right")) - 1
        offset = start - int(self.starts[index])
        shard = self.maps[index]
        if offset + length <= len(shard):
            return shard[offset : offset + length]
        parts, remaining = [], length
        while remaining:
            piece = self.maps[index][offset : offset + remaining]
            parts.append(piece)
            remaining -= len(piece)
            index, offset = index + 1, 0
        return np.concatenate(parts)
