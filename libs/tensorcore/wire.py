"""torch tensors <-> the protocol's raw-bytes frames (dtype names are the protocol's)."""

from __future__ import annotations

import torch

from computeall.protocol import wire

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


def tensor_frames(key: str, tensor: torch.Tensor, chunk_bytes: int, meta: dict | None = None) -> list[bytes]:
    t = tensor.detach().contiguous().cpu()
    raw = t.view(-1).view(torch.uint8).numpy()  # the bytes as they are, bf16 included
    return wire.encode(key, TO_WIRE[t.dtype], list(t.shape), memoryview(raw), chunk_bytes, meta)


def tensor_from_wire(received: wire.Tensor, device: torch.device | str = "cpu") -> torch.Tensor:
    if not received.data:
        return torch.empty(received.shape, dtype=FROM_WIRE[received.dtype], device=device)
    flat = torch.frombuffer(received.data, dtype=torch.uint8)
    return flat.view(FROM_WIRE[received.dtype]).reshape(received.shape).to(device)
