"""8-bit blockwise dynamic quantization, for Adam's moments: bitsandbytes' scheme, in plain torch.

A tensor's flat form is cut into blocks of `BLOCK` (256) consecutive elements. Each block is
divided by its largest magnitude (its absmax, kept in fp32) into [-1, 1], and each element is stored
as the index (uint8) of the nearest of 256 values: the dynamic map of Dettmers et al., "8-bit
Optimizers via Block-wise Quantization" (2022), signed for the first moment and unsigned for the
second, whose values span several decades (the map gives each decade its own exponent). The
rule is torchao's 8-bit optimizer state (`torchao.optim`: `scale_tensor`, `quantize_8bit_with_qmap`,
`dequant_with_qmap`) at its default block size, 256, to the byte: tests/unit/kernels/test_blockwise_8bit.py runs
the library, which stays a test dependency (importing it costs a PNode seconds and a compiler stack).
A block's scale is its absmax, at least 1e-12; an element takes the value at or below it, or the
one above once it is at least halfway there. A last block shorter than 256 is scaled on its own.
Blocks of 2048 (bitsandbytes') lost 6% of the loss on seed-64heads: a block spanned four rows of its
512-wide embedding, and a rare token's second moment, scaled by a frequent token's, fell to zero while
its first did not, so its update was m / eps (docs/decisions.md).
(bitsandbytes, which has the same map, rounds small values of a block far off on the CPU: 1e-8 of
the absmax becomes 2e-5 in its 0.50.)

Two ways to find that value: `nearest_reference`, the plain search (readable, slow: a binary
search per element), and the path `quantize` takes, one table lookup per element. The top 17 bits
of an fp32 (sign, exponent, 8 mantissa bits) cut [-1, 1] into intervals narrower than the map's
spacing, so at most one decision point between two values falls in each; the table keeps, per
interval, the value below it, how far above it the upper one is and the first fp32 that takes it, found
by bisection with the reference rule itself. So the two agree on every fp32.

Every block is quantized on its own, elementwise within itself: the result does not depend on how
a tensor is cut into chunks of whole blocks, nor on the thread count, so the same bits on any
placement.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import torch

BLOCK = 256  # elements per block: torchao's default; within one row of any embedding 256 wide or wider
_SHIFT = 15  # the table is indexed by an fp32's top 32 - 15 = 17 bits
_BUCKETS = 1 << (32 - _SHIFT)


SCALE_FLOOR = 1e-12  # a block's scale is at least this: a block of zeros stays zeros


@cache
def dynamic_map(signed: bool) -> torch.Tensor:
    """(256,) fp32, ascending: bitsandbytes' and torchao's `create_dynamic_map(signed)` (7 exponent
    bits, 8 bits). For each decade 10^-6 .. 10^0 the midpoints of an even split of [0.1, 1] (2^i of
    them in the i-th, twice as many unsigned), their negatives when signed, then 0 and 1."""
    values: list[float] = []
    for i in range(7):
        items = 2**i + 1 if signed else 2 ** (i + 1) + 1
        bounds = torch.linspace(0.1, 1, items, dtype=torch.float32)
        means = ((10 ** (i - 6)) * ((bounds[:-1] + bounds[1:]) / 2.0)).tolist()
        values += means + ([-m for m in means] if signed else [])
    return torch.tensor(sorted([*values, 0.0, 1.0]), dtype=torch.float32)


def nearest_reference(y: torch.Tensor, signed: bool) -> torch.Tensor:
    """The index of the value of the map nearest to each y in [-1, 1] (int64): the value at or below
    y (the lowest for a y below them all), or the one above once y is at least halfway there."""
    code = dynamic_map(signed)
    low = (torch.searchsorted(code, y, right=True) - 1).clamp_(0, 255)
    up = (low + 1).clamp_(max=255)
    return torch.where(y - code[low] >= (code[up] - code[low]) * 0.5, up, low)


@dataclass(frozen=True)
class _Table:
    below: torch.Tensor  # (BUCKETS,) int32: the index an interval's values take under `first_up`
    rise: torch.Tensor  # (BUCKETS,) int32: what they add to it from `first_up` on (1, but at the infinities)
    first_up: torch.Tensor  # (BUCKETS,) fp32: the least value that takes below + rise (+inf: none does)


def _values(bits: torch.Tensor) -> torch.Tensor:
    return bits.to(torch.int32).view(torch.float32)


@cache
def _table(signed: bool) -> _Table:
    """For every 17-bit prefix, the values its fp32s take: found with `nearest_reference` at both ends
    of its interval, and the point between by bisection over the fp32s in between (in value order)."""
    prefix = torch.arange(_BUCKETS, dtype=torch.int64) << _SHIFT
    low_bits = torch.where(prefix >= 1 << 31, prefix - (1 << 32), prefix)  # as int32
    span = (1 << _SHIFT) - 1

    def value_at(k: torch.Tensor, which: torch.Tensor) -> torch.Tensor:
        """The k-th fp32 of intervals `which`, in value order."""
        low = low_bits[which]
        return _values(torch.where(low < 0, low + span - k, low + k))

    def nearest(v: torch.Tensor) -> torch.Tensor:
        return nearest_reference(torch.nan_to_num(v, nan=0.0).clamp(-1, 1), signed)

    every = torch.arange(_BUCKETS)
    below, above = nearest(value_at(torch.zeros_like(prefix), every)), nearest(value_at(torch.full_like(prefix, span), every))
    first_up = torch.full((_BUCKETS,), float("inf"))
    split = (below != above).nonzero().flatten()  # the intervals a decision point falls in
    lo, hi = torch.zeros_like(split), torch.full_like(split, span)  # invariant: k = hi takes `above`
    for _ in range(_SHIFT):
        mid = (lo + hi) // 2
        up = nearest(value_at(mid, split)) == above[split]
        hi, lo = torch.where(up, mid, hi), torch.where(up, lo, mid)
    first_up[split] = value_at(hi, split)
    return _Table(below.to(torch.int32), (above - below).to(torch.int32), first_up)


def blocks_of(numel: int) -> int:
    return -(-numel // BLOCK)


def _blocked(x: torch.Tensor) -> list[tuple[torch.Tensor, slice]]:
    """x (n,) as views of whole blocks (n // BLOCK, BLOCK) and a shorter last one (1, rest), each with
    its blocks' slice of the absmax."""
    whole = x.numel() // BLOCK
    parts = [(x[: whole * BLOCK].view(whole, BLOCK), slice(0, whole))] if whole else []
    if whole * BLOCK < x.numel():
        parts.append((x[whole * BLOCK:].view(1, -1), slice(whole, whole + 1)))
    return parts


@torch.no_grad()
def quantize(x: torch.Tensor, signed: bool, codes: torch.Tensor | None = None,
             absmax: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """x (n,) fp32 -> (codes (n,) uint8, absmax (blocks_of(n),) fp32), written into `codes` and
    `absmax` when given: each block's scale, its largest magnitude (at least `SCALE_FLOOR`)."""
    table = _table(signed)
    codes = torch.empty(x.numel(), dtype=torch.uint8, device=x.device) if codes is None else codes
    absmax = torch.empty(blocks_of(x.numel()), dtype=torch.float32, device=x.device) if absmax is None else absmax
    for (block, where), (block_codes, _) in zip(_blocked(x), _blocked(codes)):
        block_max = absmax[where]
        torch.amax(block.abs(), dim=1, out=block_max).clamp_(min=SCALE_FLOOR)
        y = (block / block_max.unsqueeze(1)).reshape(-1)
        prefix = y.view(torch.int32) >> _SHIFT
        prefix &= _BUCKETS - 1
        up = y >= torch.index_select(table.first_up, 0, prefix)
        del y
        chosen = torch.index_select(table.below, 0, prefix)
        chosen += torch.index_select(table.rise, 0, prefix).mul_(up)  # in place: a chunk's temporaries are few
        block_codes.view(-1).copy_(chosen)
    return codes, absmax


@torch.no_grad()
def dequantize(codes: torch.Tensor, absmax: torch.Tensor, signed: bool,
               out: torch.Tensor | None = None) -> torch.Tensor:
    """(codes (n,) uint8, absmax) -> (n,) fp32: each code's value times its block's scale."""
    out = torch.empty(codes.numel(), dtype=torch.float32, device=codes.device) if out is None else out
    torch.index_select(dynamic_map(signed).to(codes.device), 0, codes.int(), out=out)
    for block, where in _blocked(out):
        block.mul_(absmax[where].unsqueeze(1))
    return out
