"""torch tensors <-> the protocol's raw-bytes frames (dtype names are the protocol's).

A tensor travels in its wire form (`wire_formats.Encoded`): "raw" is its bytes as they are,
"int8-block" the int8 values followed by their fp32 scales.
"""

from __future__ import annotations

import math

import torch

from computeall.protocol import wire

from .wire_formats import Encoded

TO_WIRE = {
    torch.float32: "float32",
    torch.float16: "float16",
    torch.bfloat16: "bfloat16",
    torch.int64: "int64",
    torch.int32: "int32",
    torch.uint32: "uint32",
    torch.uint16: "uint16",
    torch.uint8: "uint8",
    torch.bool: "bool",
}
FROM_WIRE = {name: dtype for dtype, name in TO_WIRE.items()}


def _bytes(t: torch.Tensor) -> torch.Tensor:
    return t.detach().contiguous().cpu().view(-1).view(torch.uint8)  # the bytes as they are, bf16 included


def encoded_frames(key: str, encoded: Encoded, chunk_bytes: int, meta: dict | None = None) -> list[bytes]:
    raw = _bytes(encoded.values)
    if encoded.scales is not None:
        raw = torch.cat([raw, _bytes(encoded.scales.float())])
    return wire.encode(key, TO_WIRE[encoded.dtype], list(encoded.shape), memoryview(raw.numpy()), chunk_bytes, meta,
                       encoding=encoded.encoding)


def tensor_frames(key: str, tensor: torch.Tensor, chunk_bytes: int, meta: dict | None = None) -> list[bytes]:
    return encoded_frames(key, Encoded.raw(tensor), chunk_bytes, meta)


def encoded_from_wire(received: wire.Tensor, device: torch.device | str = "cpu") -> Encoded:
    """The wire form of a reassembled tensor (its header already checked the byte count)."""
    dtype, shape = FROM_WIRE[received.dtype], tuple(received.shape)
    if not received.data:
        return Encoded.raw(torch.empty(shape, dtype=dtype, device=device))
    flat = torch.frombuffer(received.data, dtype=torch.uint8)
    if received.encoding == "raw":
        return Encoded.raw(flat.view(dtype).reshape(shape).to(device))
    n = math.prod(shape)  # one int8 per element, then the scales
    values = flat[:n].view(torch.int8).to(device)
    scales = flat[n:].clone().view(torch.float32).to(device)  # cloned: the fp32 view needs aligned storage
    return Encoded("int8-block", values, dtype, shape, scales)


def tensor_from_wire(received: wire.Tensor, device: torch.device | str = "cpu") -> torch.Tensor:
    return encoded_from_wire(received, device).decode()
