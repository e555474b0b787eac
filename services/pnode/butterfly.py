"""The butterfly between the PNodes hosting one VNode in each replica (`micro_tree.exchanges`).

At level l, replicas r and r ^ 2**l swap what they hold for their subtrees. `summed` adds the two
partial sums left + right, so after log2(R) levels every replica holds the sum with the bits of one
replica adding it all (a step's gradients; diloco's dense pseudo-gradients). `gathered` keeps both
sides' messages in replica order instead, so after log2(R) levels every replica holds every
replica's message (diloco's sparse ones, which cannot be added on the way without growing).
How a part travels and arrives is the caller's: `send` puts it in an outbox, `take` waits for it.
"""

from __future__ import annotations

from typing import Awaitable, Callable

import torch

from computeall.protocol.micro_tree import Exchange
from computeall.tensorcore.micro_gradients import add_parts
from computeall.tensorcore.wire_formats import Encoded, WireFormat

Compute = Callable[..., Awaitable]
Send = Callable[[Exchange, Encoded], None]
Take = Callable[[Exchange], Awaitable[torch.Tensor]]


class SumAborted(RuntimeError):
    pass


def _in_fp32(mine: Encoded, theirs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Both partners' parts as they travelled, widened to fp32 for the addition."""
    return mine.decode().float(), theirs.float()


def _check(what: str, exchange: Exchange, theirs: torch.Tensor, dtype: torch.dtype, shape: tuple[int, ...]) -> None:
    if theirs.dtype != dtype or tuple(theirs.shape) != shape:
        raise SumAborted(f"{what}: replica {exchange.partner} sent {theirs.dtype} {list(theirs.shape)}, "
                         f"this replica expects {dtype} {list(shape)}")


async def summed(what: str, exchanges: list[Exchange], total: torch.Tensor, send: Send, take: Take,
                 compute: Compute, wire: WireFormat | None = None) -> torch.Tensor:
    """`total` summed over the replicas, the same bits on each. With a `wire` format, what is sent is
    encoded, and both sides add the decoded values (in fp32)."""
    for exchange in exchanges:
        encoded = Encoded.raw(total) if wire is None else await compute(wire.encode, total)
        send(exchange, encoded)
        theirs = await take(exchange)
        _check(what, exchange, theirs, encoded.dtype, encoded.shape)
        if wire is not None:  # both sides add what travelled, never their own unrounded sum
            total, theirs = await compute(_in_fp32, encoded, theirs)
        total = await compute(exchange.combine, total, theirs, add_parts)
    return total


async def gathered(what: str, exchanges: list[Exchange], mine: torch.Tensor, send: Send,
                   take: Take) -> list[torch.Tensor]:
    """Every replica's message (flat, all of one size), in replica order; `mine` is this replica's."""
    held = [mine]
    for exchange in exchanges:
        send(exchange, Encoded.raw(torch.cat(held)))
        theirs = await take(exchange)
        _check(what, exchange, theirs, mine.dtype, (len(held) * mine.numel(),))  # both sides hold as many
        held = exchange.combine(held, list(theirs.split(mine.numel())), lambda left, right: left + right)
    return held
