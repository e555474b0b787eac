"""Digests of tensors for spot checks: blake3 of dtype, shape and the blake3 of the raw bytes, 128 bits as hex.

A check compares these, never the tensors, so two PNodes agree exactly when they computed the
same bits. blake3 is the fastest cryptographic hash at hand (about 8 GB/s on one core with a warm
cache, 4-6 within a step; blake2b about 1), which keeps a ledger of every output and gradient of a
step cheap next to the step itself. The bytes' digest is the wire's frame digest
(`wire.frame_digest`), so a tensor that arrived raw has its digest without being hashed again
(`received_digest`): the wire has verified that digest of those very bytes.
"""

from __future__ import annotations

from typing import Iterable, Sequence

import blake3
import torch

from computeall.protocol import wire

from .tensor_frames import TO_WIRE


def _data_digest(t: torch.Tensor) -> str:
    """The digest of a (contiguous, CPU) tensor's bytes: what the wire's frame header carries for it."""
    return wire.frame_digest(t.view(-1).view(torch.uint8).numpy())


def _of(dtype: str, shape: Sequence[int], data_digest: str) -> str:
    return blake3.blake3(f"{dtype}{list(shape)};{data_digest}".encode()).hexdigest(16)


def tensor_digest(tensor: torch.Tensor) -> str:
    t = tensor.detach().contiguous().cpu()
    return _of(TO_WIRE[t.dtype], t.shape, _data_digest(t))


def received_digest(received: wire.Tensor) -> str:
    """`tensor_digest` of the tensor a raw frame decodes to, from the digest the reassembler verified."""
    if received.encoding != "raw" or received.digest is None:
        raise ValueError(f"{received.key!r} did not arrive raw through the reassembler: hash the tensor instead")
    return _of(received.dtype, received.shape, received.digest)


def tensors_digest(tensors: Iterable[torch.Tensor | None]) -> str:
    """One digest of several tensors in order (a missing one counts as such)."""
    hasher = blake3.blake3()
    for t in tensors:
        hasher.update(b"none;" if t is None else tensor_digest(t).encode())
    return hasher.hexdigest(16)
