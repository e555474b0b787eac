"""safetensors written and read one tensor at a time, through a file: never a whole VNode in memory.

The `safetensors` package serializes a dict of tensors into one bytes object (or copies each tensor
into bytes before writing a file), and reads a file through a memory map whose touched pages stay
resident until it is closed: either way a checkpoint of a VNode costs as much memory again as its
state. Here the header is made from the tensors' dtypes and shapes alone, then each tensor's bytes go
to the file straight from its storage (`write`); a reader (`SafetensorsFile`) parses the header and
reads one tensor into a fresh tensor when asked, with plain file reads.

The layout is the package's own (tensors ordered by dtype, the widest first, then by name; the header
JSON compact, `__metadata__` first, padded with spaces to 8 bytes), so the same state gives the same
bytes, and digest, whichever writes it (`tests/unit/tensorcore/test_safetensors_stream.py`).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator, Mapping
from typing import BinaryIO

import torch

# safetensors' dtype names, in the order of its `Dtype` enum: tensors are laid out by this rank, highest first
_DTYPES: dict[str, torch.dtype] = {
    "BOOL": torch.bool, "U8": torch.uint8, "I8": torch.int8, "I16": torch.int16, "U16": torch.uint16,
    "F16": torch.float16, "BF16": torch.bfloat16, "I32": torch.int32, "U32": torch.uint32,
    "F32": torch.float32, "F64": torch.float64, "I64": torch.int64, "U64": torch.uint64,
}
_NAMES = {dtype: name for name, dtype in _DTYPES.items()}
_RANK = {name: rank for rank, name in enumerate(_DTYPES)}
MAX_HEADER_BYTES = 100_000_000  # what the safetensors package accepts


class SafetensorsError(ValueError):
    """The file is not safetensors this reader accepts; the message says what is wrong."""


def _storage_bytes(t: torch.Tensor) -> memoryview:
    """A tensor's bytes as they are (bf16 included), without a copy when it is contiguous on the CPU."""
    return memoryview(t.detach().contiguous().cpu().reshape(-1).view(torch.uint8).numpy())


def write(out: BinaryIO, tensors: Mapping[str, torch.Tensor], metadata: dict[str, str] | None = None) -> int:
    """Write `tensors` (views are fine: each is read once, when its turn comes) as safetensors to `out`;
    the bytes written."""
    unknown = sorted(name for name, t in tensors.items() if t.dtype not in _NAMES)
    if unknown:
        raise ValueError(f"no safetensors dtype for {', '.join(unknown)}")
    order = sorted(tensors, key=lambda n: (-_RANK[_NAMES[tensors[n].dtype]], n))
    header: dict[str, object] = {"__metadata__": metadata} if metadata else {}
    offset = 0
    for name in order:
        t = tensors[name]
        size = t.numel() * t.element_size()
        header[name] = {"dtype": _NAMES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + size]}
        offset += size
    encoded = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode()
    encoded += b" " * (-len(encoded) % 8)
    out.write(struct.pack("<Q", len(encoded)))
    out.write(encoded)
    for name in order:
        out.write(_storage_bytes(tensors[name]))
    return 8 + len(encoded) + offset


class SafetensorsFile(Mapping[str, torch.Tensor]):
    """The tensors of a safetensors file, each read from `file` (seekable, binary) when it is looked up.

    The header is checked against the file's size before anything is allocated: every tensor's dtype is
    known, its bytes are what its shape needs and lie within the file.
    """

    def __init__(self, file: BinaryIO) -> None:
        self.file = file
        size = file.seek(0, 2)
        file.seek(0)
        raw = file.read(8)
        if len(raw) < 8:
            raise SafetensorsError(f"{size} bytes are too few for a safetensors header")
        (length,) = struct.unpack("<Q", raw)
        if length > min(MAX_HEADER_BYTES, size - 8):
            raise SafetensorsError(f"its header says it is {length} bytes long, in a file of {size}")
        try:
            header = json.loads(file.read(length))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise SafetensorsError(f"its header is not JSON: {exc}") from None
        if not isinstance(header, dict):
            raise SafetensorsError("its header is not a JSON object")
        metadata = header.pop("__metadata__", None) or {}
        self.metadata: dict[str, str] = metadata if isinstance(metadata, dict) else {}
        self._start = 8 + length
        self._entries = {name: self._entry(name, info, size - self._start) for name, info in header.items()}

    @staticmethod
    def _entry(name: str, info: object, data_bytes: int) -> tuple[torch.dtype, tuple[int, ...], int]:
        """(dtype, shape, offset in the data) of one header entry, checked."""
        try:
            dtype = _DTYPES[info["dtype"]]  # type: ignore[index]
            shape = tuple(int(d) for d in info["shape"])  # type: ignore[index]
            start, end = (int(o) for o in info["data_offsets"])  # type: ignore[index]
        except (KeyError, TypeError, ValueError):
            raise SafetensorsError(f"its header entry for {name!r} is not a dtype, a shape and two data offsets") from None
        numel = 1
        for d in shape:
            if d < 0:
                raise SafetensorsError(f"{name} has a negative dimension in {list(shape)}")
            numel *= d
        needed = numel * torch.empty((), dtype=dtype).element_size()
        if not 0 <= start <= end <= data_bytes or end - start != needed:
            raise SafetensorsError(f"{name} ({info['dtype']} {list(shape)}, {needed} bytes) lies at [{start}, {end}) "  # type: ignore[index]
                                   f"of {data_bytes} bytes of data")
        return dtype, shape, start

    def __getitem__(self, name: str) -> torch.Tensor:
        dtype, shape, start = self._entries[name]
        tensor = torch.empty(shape, dtype=dtype)
        view = _storage_bytes(tensor)
        self.file.seek(self._start + start)
        if self.file.readinto(view) != len(view):
            raise SafetensorsError(f"{name} is cut short")
        return tensor

    def shape(self, name: str) -> tuple[int, ...]:
        return self._entries[name][1]

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)
