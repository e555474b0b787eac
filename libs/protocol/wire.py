"""Tensor wire codec: a validated header plus raw bytes, chunked below `max_payload`.

A frame is ``MAGIC | u32 header length | header JSON | chunk bytes``. The header
names the tensor (`key`), its dtype and shape, how its bytes encode it (`encoding`),
the chunk's index and count and a digest of the whole tensor. The receiver checks every field before it keeps a
byte, reassembles the chunks and verifies the digest: nothing is unpickled and a
bad frame is rejected with a reason (`WireError`), never trusted.

This module knows bytes, not torch: `computeall.tensorcore.tensor_frames` converts tensors.
"""

from __future__ import annotations

import hashlib
import json
import math
import struct
import time
from dataclasses import dataclass, field

from typing import Literal

import blake3
from pydantic import BaseModel, ConfigDict, Field, ValidationError

MAGIC = b"CAT1"
_HEADER_LEN = struct.Struct("<I")
MAX_HEADER_BYTES = 4096
DEFAULT_MAX_TENSOR_BYTES = 1 << 31

ITEMSIZE = {
    "float32": 4,
    "float16": 2,
    "bfloat16": 2,
    "int64": 8,
    "int32": 4,
    "uint32": 4,
    "uint16": 2,
    "uint8": 1,
    "bool": 1,
}


# A VNode's wire format: how its output travels to its consumers and their gradients of it come
# back, on every edge, local or remote (so placement never changes the math): as computed ("fp32":
# no compression, never widened), cast to bf16 or fp16, or int8 with one absmax scale per block.
Wire = Literal["fp32", "bf16", "fp16", "int8"]

# "raw": the elements as they are, `dtype` wide. "int8-block": the elements as int8, then one
# float32 scale per block of INT8_BLOCK elements of a row (the last dimension: one token's features);
# a row's last block may be short, and no block spans two rows, so no token's values depend on
# another's (a later token's, in a causal model). Element (r, c) is q[r, c] * scale[r, c // INT8_BLOCK],
# in `dtype` (computeall.tensorcore.wire_formats makes and reads it).
Encoding = Literal["raw", "int8-block"]
INT8_BLOCK = 128
FLOATING = ("float32", "float16", "bfloat16")


def rows_of(shape: list[int] | tuple[int, ...]) -> tuple[int, int]:
    """(rows, row length) of a tensor as "int8-block" cuts it: its last dimension is a row."""
    return (math.prod(shape[:-1]), shape[-1]) if shape else (1, 1)


def encoded_bytes(encoding: str, dtype: str, shape: list[int] | tuple[int, ...]) -> int:
    """How many bytes a tensor of this dtype and shape takes in this encoding."""
    if encoding == "int8-block":
        rows, length = rows_of(shape)
        return rows * (length + 4 * math.ceil(length / INT8_BLOCK))
    return math.prod(shape) * ITEMSIZE[dtype]


class WireError(ValueError):
    """A frame that cannot be accepted; the message says why."""


class TensorHeader(BaseModel):
    model_config = ConfigDict(extra="forbid")

    key: str = Field(..., max_length=512)
    dtype: str
    shape: list[int] = Field(..., max_length=8)
    encoding: Encoding = "raw"  # raw: the elements as they are; int8-block: int8 values, then a float32 scale per 128 of a row
    chunk: int = Field(..., ge=0)
    chunks: int = Field(..., ge=1)
    offset: int = Field(..., ge=0)
    total_bytes: int = Field(..., ge=0)
    digest: str = Field(..., min_length=32, max_length=32)
    meta: dict[str, str | int | float | bool] = Field(default_factory=dict)


def digest(data: bytes | memoryview) -> str:
    """blake2b-128: the digest of stored objects (checkpoints, tokenizers), which logs keep for good."""
    return digester(data).hexdigest()


def digester(data: bytes | memoryview = b""):
    """`digest` of bytes that come in parts: `update` it with each, then `hexdigest`."""
    return hashlib.blake2b(data, digest_size=16)


def frame_digest(data: bytes | memoryview) -> str:
    """blake3-128, of a tensor on the wire: sender and receiver each hash every byte of every tensor,
    at several GB/s per core (blake2b: about one). Frames live for a moment, so this can change freely."""
    return blake3.blake3(data).hexdigest(16)


def encode(
    key: str,
    dtype: str,
    shape: list[int] | tuple[int, ...],
    data: bytes | memoryview,
    chunk_bytes: int,
    meta: dict[str, str | int | float | bool] | None = None,
    encoding: Encoding = "raw",
) -> list[bytes]:
    """Split one tensor's bytes (in `encoding`) into frames whose size stays below `chunk_bytes`."""
    if dtype not in ITEMSIZE:
        raise WireError(f"dtype {dtype!r} cannot go on the wire; use one of {sorted(ITEMSIZE)}")
    data = memoryview(data).cast("B")
    body = max(1, chunk_bytes - MAX_HEADER_BYTES - len(MAGIC) - _HEADER_LEN.size)
    chunks = max(1, math.ceil(len(data) / body))
    whole = frame_digest(data)
    frames = []
    for i in range(chunks):
        part = data[i * body : (i + 1) * body]
        header = TensorHeader(
            key=key,
            dtype=dtype,
            shape=list(shape),
            encoding=encoding,
            chunk=i,
            chunks=chunks,
            offset=i * body,
            total_bytes=len(data),
            digest=whole,
            meta=meta or {},
        )
        raw = header.model_dump_json(exclude_defaults=True).encode()  # "raw" encoding and no meta go unsaid
        frames.append(b"".join((MAGIC, _HEADER_LEN.pack(len(raw)), raw, part)))  # the chunk's bytes copied once
    return frames


def decode_frame(frame: bytes, max_tensor_bytes: int = DEFAULT_MAX_TENSOR_BYTES) -> tuple[TensorHeader, memoryview]:
    """Parse and check one frame; raise `WireError` with the reason when it is bad."""
    view = memoryview(frame)
    prefix = len(MAGIC) + _HEADER_LEN.size
    if len(view) < prefix or bytes(view[: len(MAGIC)]) != MAGIC:
        raise WireError("not a tensor frame (bad magic)")
    (header_len,) = _HEADER_LEN.unpack(view[len(MAGIC) : prefix])
    if header_len > MAX_HEADER_BYTES or prefix + header_len > len(view):
        raise WireError(f"header length {header_len} is out of range (truncated frame?)")
    try:
        header = TensorHeader.model_validate(json.loads(bytes(view[prefix : prefix + header_len])))
    except (ValueError, ValidationError) as exc:
        raise WireError(f"malformed header: {exc}") from None
    if header.dtype not in ITEMSIZE:
        raise WireError(f"unknown dtype {header.dtype!r}")
    if header.encoding == "int8-block" and header.dtype not in FLOATING:
        raise WireError(f"int8-block encodes floating tensors, not {header.dtype}")
    if any(d < 0 for d in header.shape):
        raise WireError(f"negative dimension in shape {header.shape}")
    expected = encoded_bytes(header.encoding, header.dtype, header.shape)
    if expected != header.total_bytes:
        raise WireError(
            f"shape {header.shape} of {header.dtype} ({header.encoding}) needs {expected} bytes, header says {header.total_bytes}"
        )
    if header.total_bytes > max_tensor_bytes:
        raise WireError(f"tensor of {header.total_bytes} bytes exceeds the limit of {max_tensor_bytes}")
    if header.chunk >= header.chunks:
        raise WireError(f"chunk {header.chunk} of {header.chunks} is out of range")
    body = view[prefix + header_len :]
    if header.offset + len(body) > header.total_bytes:
        raise WireError("chunk runs past the end of the tensor")
    last = header.chunk == header.chunks - 1
    if last and header.offset + len(body) != header.total_bytes:
        raise WireError("last chunk does not end the tensor (truncated)")
    return header, body


@dataclass
class _Partial:
    header: TensorHeader
    buffer: bytearray
    seen: set[int] = field(default_factory=set)
    received: int = 0
    started: float = field(default_factory=time.monotonic)


def _same_tensor(a: TensorHeader, b: TensorHeader) -> bool:
    """Two chunks of one tensor: they agree on everything but where they sit in it."""
    return (a.digest, a.chunks, a.total_bytes, a.dtype, a.shape, a.encoding, a.meta) == (
        b.digest, b.chunks, b.total_bytes, b.dtype, b.shape, b.encoding, b.meta)


@dataclass
class Tensor:
    """A reassembled, digest-verified tensor as bytes."""

    key: str
    dtype: str
    shape: list[int]
    data: bytearray
    meta: dict[str, str | int | float | bool]
    encoding: Encoding = "raw"
    digest: str | None = None  # the frame digest of `data`, verified by the reassembler that made it


class Reassembler:
    """Collects a tensor's chunks; returns a `Tensor` once all arrived and the digest matches.

    Tensors in flight are kept per sender, by (sender, key): a sender's frames can only complete or
    replace its own tensors, never another's, so nobody can take the keys of someone else's tensors
    (a PNode names the sender from the frame's subject; a client reading one peer's replies names
    none). Bounded per sender: at most `max_pending` unfinished tensors, its oldest dropped for a
    newer one (a sender publishes a tensor's chunks one after the other, so its oldest unfinished
    tensor is one whose rest was lost with an aborted try), and each expires after `ttl_s`. The
    buffer of a tensor is taken at its first chunk, at the size its header claims: a receiver that
    knows what a sender may send (a PNode: from its plan) checks that claim before `add`.
    """

    def __init__(self, max_tensor_bytes: int = DEFAULT_MAX_TENSOR_BYTES, max_pending: int = 16, ttl_s: float = 120.0):
        self.max_tensor_bytes = max_tensor_bytes
        self.max_pending = max_pending
        self.ttl_s = ttl_s
        self._pending: dict[str, dict[str, _Partial]] = {}  # sender -> key -> partial, oldest first

    def feed(self, frame: bytes, sender: str = "") -> Tensor | None:
        header, body = decode_frame(frame, self.max_tensor_bytes)
        return self.add(header, body, sender)

    def add(self, header: TensorHeader, body: memoryview, sender: str = "") -> Tensor | None:
        """One chunk `decode_frame` checked, from `sender`: the whole tensor once this completes it."""
        if header.chunks == 1:  # the whole tensor in one frame: nothing to hold
            return self._verified(header, bytearray(body))
        self._expire()
        mine = self._pending.setdefault(sender, {})
        partial = mine.get(header.key)
        if partial is not None and not _same_tensor(partial.header, header):
            del mine[header.key]  # the sender's newer tensor under this key replaces one it left unfinished
            partial = None
        if partial is None:
            while len(mine) >= self.max_pending:
                del mine[next(iter(mine))]
            partial = mine[header.key] = _Partial(header, bytearray(header.total_bytes))
        if header.chunk in partial.seen:
            return None  # a redelivered chunk: already have it
        partial.buffer[header.offset : header.offset + len(body)] = body
        partial.seen.add(header.chunk)
        partial.received += len(body)
        if len(partial.seen) < header.chunks:
            return None
        del mine[header.key]
        if not mine:
            del self._pending[sender]
        if partial.received != header.total_bytes:
            raise WireError(f"chunks of {header.key!r} overlap or leave gaps; tensor dropped")
        return self._verified(partial.header, partial.buffer)

    def pending(self, sender: str = "") -> list[str]:
        """The keys of `sender`'s unfinished tensors, oldest first."""
        return list(self._pending.get(sender, {}))

    @staticmethod
    def _verified(header: TensorHeader, data: bytearray) -> Tensor:
        if frame_digest(data) != header.digest:
            raise WireError(f"digest mismatch for {header.key!r}; tensor dropped")
        return Tensor(header.key, header.dtype, header.shape, data, header.meta, header.encoding, header.digest)

    def _expire(self) -> None:
        now = time.monotonic()
        for sender, mine in list(self._pending.items()):
            for key in [k for k, p in mine.items() if now - p.started > self.ttl_s]:
                del mine[key]
            if not mine:
                del self._pending[sender]
