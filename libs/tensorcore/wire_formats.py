"""Wire formats: how a VNode's output, and the gradients of it, travel on its edges.

A VNode's `wire` setting (network YAML; `Graph.wire`) applies on every one of its output edges,
local or remote: its consumers read `encode(out).decode()`, and each consumer's gradient of it
comes back as `encode(grad).decode()`. A PNode sends the encoded form and the receiver decodes
those bytes with the same code, so a consumer on another PNode reads the very bits a consumer
beside the producer reads: placement never changes the math, whatever the compression.

- `fp32`: as computed, no compression (a bf16 VNode's output stays bf16: a wire never widens).
- `bf16`, `fp16`: floating tensors wider than 2 bytes are cast. A consumer casts what it reads to
  its own precision inside its graph, so the gradient it hands back is in the wire dtype as well.
- `int8`: blockwise absmax; the protocol's "int8-block" layout (int8 values, then one fp32 scale per
  `INT8_BLOCK` elements of a row, the last dimension). A block never spans two tokens, so what a
  token's consumer reads never depends on a later token's values (a narrow edge, such as a
  bottleneck's 8 features, would otherwise share one scale among 16 positions). Rounding is
  elementwise and the absmax exact, so the result does not depend on the thread count. A non-finite
  element makes its whole block non-finite, so an overflow still reaches the producer and the step
  is skipped. Rows too short to gain from it (a scale costs 4 bytes) travel as they are.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

import torch
import torch.nn.functional as F

from computeall.protocol.wire import INT8_BLOCK, Encoding, encoded_bytes, rows_of

_TINY = torch.finfo(torch.float32).tiny


@dataclass(frozen=True)
class Encoded:
    """A tensor in its wire form: `values` as they travel (int8-block: the int8 values, flat, with
    their `scales`), and the dtype and shape the receiver decodes them to."""

    encoding: Encoding
    values: torch.Tensor
    dtype: torch.dtype
    shape: tuple[int, ...]
    scales: torch.Tensor | None = None

    @classmethod
    def raw(cls, t: torch.Tensor) -> Encoded:
        return cls("raw", t, t.dtype, tuple(t.shape))

    @property
    def nbytes(self) -> int:
        extra = 0 if self.scales is None else self.scales.numel() * self.scales.element_size()
        return self.values.numel() * self.values.element_size() + extra

    def decode(self) -> torch.Tensor:
        """The tensor the consumer reads (raw: `values` itself, no copy)."""
        if self.encoding == "raw":
            return self.values
        rows, length = rows_of(self.shape)
        per_element = self.scales.view(rows, -1).repeat_interleave(INT8_BLOCK, dim=1)[:, :length]
        return (self.values.float().view(rows, length) * per_element).to(self.dtype).view(self.shape)


class WireFormat(Protocol):
    def encode(self, t: torch.Tensor) -> Encoded: ...


class AsComputed:
    def encode(self, t: torch.Tensor) -> Encoded:
        return Encoded.raw(t)


@dataclass(frozen=True)
class Cast:
    dtype: torch.dtype

    def encode(self, t: torch.Tensor) -> Encoded:
        if t.is_floating_point() and t.element_size() > self.dtype.itemsize:
            t = t.to(self.dtype)
        return Encoded.raw(t)


class BlockInt8:
    def encode(self, t: torch.Tensor) -> Encoded:
        if not t.is_floating_point():
            return Encoded.raw(t)  # token ids are never compressed
        if encoded_bytes("int8-block", "float32", t.shape) >= t.numel() * t.element_size():
            return Encoded.raw(t)  # a wire never widens
        rows, length = rows_of(t.shape)
        padded = math.ceil(length / INT8_BLOCK) * INT8_BLOCK
        blocks = F.pad(t.detach().reshape(rows, length).float(), (0, padded - length)).view(rows, -1, INT8_BLOCK)
        scales = blocks.abs().amax(dim=2) / 127  # (rows, blocks per row); inf or nan when the block holds one
        q = torch.round(blocks / scales.clamp_min(_TINY).unsqueeze(2)).clamp_(-127, 127)
        values = q.to(torch.int8).view(rows, padded)[:, :length].reshape(-1)
        return Encoded("int8-block", values, t.dtype, tuple(t.shape), scales.view(-1))


WIRE_FORMATS: dict[str, WireFormat] = {
    "fp32": AsComputed(),
    "bf16": Cast(torch.bfloat16),
    "fp16": Cast(torch.float16),
    "int8": BlockInt8(),
}


def wire_format(name: str) -> WireFormat:
    try:
        return WIRE_FORMATS[name]
    except KeyError:
        raise ValueError(f"unknown wire format {name!r}; use one of {', '.join(WIRE_FORMATS)}") from None
