"""diloco's sparse pseudo-gradient messages (`SparseCompression`): encode, decode, and the sum of several.

A message is a flat vector's chunks (`SparseLayout`) with, for each chunk, its `k` largest entries by
magnitude in rank order: the chunk's magnitude levels (bf16), then one sign bit per entry, then
each entry's place in its chunk (`index_bits` each), all bit-packed into one uint8 tensor. Travelling
in rank order, an entry's level is its rank's group and needs no bits of its own.

Every step is exact or order-fixed, so a message is a pure function of the vector, whatever the
thread count: the selection ranks by (magnitude, lower place first) as one integer key per entry, so
no two entries tie; a group's magnitude is the mean of its entries by one sequential sum; decoding
writes each entry to its own place. The replicas add the decoded messages in replica order.
"""

from __future__ import annotations

import torch

from computeall.protocol.replica_sync import SparseCompression, SparseLayout


class BadMessage(ValueError):
    """A message that does not decode: its size or its places are not what the layout says."""


def pack_bits(values: torch.Tensor, width: int) -> torch.Tensor:
    """Non-negative integers below 2**width, `width` bits each, little-endian, as uint8."""
    if width == 0 or values.numel() == 0:
        return torch.zeros(0, dtype=torch.uint8)
    shifts = torch.arange(width, dtype=torch.int64)
    bits = ((values.reshape(-1, 1).to(torch.int64) >> shifts) & 1).reshape(-1)
    bits = torch.cat([bits, bits.new_zeros(-bits.numel() % 8)]).view(-1, 8)
    return (bits << torch.arange(8, dtype=torch.int64)).sum(dim=1).to(torch.uint8)


def unpack_bits(packed: torch.Tensor, width: int, count: int) -> torch.Tensor:
    """The inverse of `pack_bits`: `count` integers of `width` bits, as int64."""
    if width == 0:
        return torch.zeros(count, dtype=torch.int64)
    bits = ((packed.to(torch.int64).reshape(-1, 1) >> torch.arange(8, dtype=torch.int64)) & 1).reshape(-1)
    return (bits[: count * width].view(count, width) << torch.arange(width, dtype=torch.int64)).sum(dim=1)


def _chunked(flat: torch.Tensor, layout: SparseLayout) -> torch.Tensor:
    padded = flat.new_zeros(layout.chunks * layout.chunk)
    padded[: layout.elements] = flat
    return padded.view(layout.chunks, layout.chunk)


def _level_of_rank(layout: SparseLayout) -> torch.Tensor:
    """The magnitude level of each rank: `levels` groups of ranks, as equal as they divide."""
    return torch.arange(layout.k) * layout.levels // layout.k


def encode(flat: torch.Tensor, config: SparseCompression) -> torch.Tensor:
    """The message of a flat fp32 vector (finite: a pseudo-gradient of finite parameters)."""
    layout = config.layout(flat.numel())
    chunks = _chunked(flat.detach().float(), layout)
    magnitude = chunks.abs()
    # one key per entry: the magnitude's bits (ordered as the non-negative floats are), then the
    # place reversed, so that of two equal magnitudes the lower place ranks first and none tie
    keys = magnitude.view(torch.int32).to(torch.int64)
    keys.bitwise_left_shift_(layout.index_bits).bitwise_or_(torch.arange(layout.chunk - 1, -1, -1, dtype=torch.int64))
    ranked = keys.topk(layout.k, dim=1, sorted=True).values  # (chunks, k): unique keys, largest first
    chosen = layout.chunk - 1 - (ranked & (layout.chunk - 1))
    picked = chunks.gather(1, chosen)
    # each level's magnitude: the mean of its ranks' magnitudes, from one running sum in rank order
    level = _level_of_rank(layout)
    running = torch.cat([picked.new_zeros(layout.chunks, 1, dtype=torch.float64),
                         picked.abs().double().cumsum(dim=1)], dim=1)  # [:, i]: the sum over ranks below i
    ends = [int((level <= lv).sum()) for lv in range(layout.levels)]
    starts = [0, *ends[:-1]]
    scales = torch.stack([(running[:, e] - running[:, s]) / max(1, e - s) for s, e in zip(starts, ends)], dim=1)
    scales = scales.to(torch.bfloat16)
    return torch.cat([scales.reshape(-1).view(torch.uint8), pack_bits(picked.reshape(-1) < 0, 1),
                      pack_bits(chosen.reshape(-1), layout.index_bits)])


def decode(message: torch.Tensor, elements: int, config: SparseCompression) -> torch.Tensor:
    """The flat fp32 vector a message stands for; `BadMessage` when it is not one of `elements` values."""
    layout = config.layout(elements)
    if message.dtype != torch.uint8 or message.numel() != layout.message_bytes:
        raise BadMessage(f"a sparse message of {elements} values is {layout.message_bytes} bytes of uint8; "
                         f"this one is {message.numel()} of {message.dtype}")
    scales_end = layout.scale_bytes
    signs_end = scales_end + layout.sign_bytes
    scales = message[:scales_end].clone().view(torch.bfloat16).float().view(layout.chunks, layout.levels)
    if not torch.isfinite(scales).all():
        raise BadMessage("a sparse message carries a non-finite magnitude")
    negative = unpack_bits(message[scales_end:signs_end], 1, layout.entries).view(layout.chunks, layout.k)
    chosen = unpack_bits(message[signs_end:], layout.index_bits, layout.entries).view(layout.chunks, layout.k)
    ordered = chosen.sort(dim=1).values
    if layout.k > 1 and (ordered[:, 1:] == ordered[:, :-1]).any():
        raise BadMessage("a sparse message names one place of a chunk twice")
    values = scales[:, _level_of_rank(layout)] * (1 - 2 * negative).float()
    chunks = torch.zeros(layout.chunks, layout.chunk)
    chunks.scatter_(1, chosen, values)
    return chunks.view(-1)[:elements]


def with_error_feedback(delta: torch.Tensor, error: torch.Tensor | None,
                        config: SparseCompression) -> torch.Tensor:
    """This replica's message for pseudo-gradient `delta`; `error` (flat fp32, in place) becomes
    `error_decay` * error + delta less what the message carries. None: no error feedback."""
    if error is None:
        return encode(delta, config)
    error.mul_(config.error_decay).add_(delta)
    message = encode(error, config)
    error.sub_(decode(message, error.numel(), config))
    return message


def decoded_sum(messages: list[torch.Tensor], elements: int, config: SparseCompression) -> torch.Tensor:
    """The replicas' messages decoded and added in replica order: the same bits on every replica."""
    total = decode(messages[0], elements, config)
    for message in messages[1:]:
        total += decode(message, elements, config)
    return total
