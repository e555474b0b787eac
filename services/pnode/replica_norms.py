"""diloco's `inner_decisions: own`: a replica's PNodes tell each other their gradients' squared norms.

Each replica decides its inner steps' skip and clip from its own gradient norm (`clipping.clip`),
so none waits for a round trip to the orchestrator. No PNode of a replica holds all its gradients:
at the end of a step's pass each sends the squared norms of the VNodes it hosts (one value each, in
graph order, a NaN for an overflow) to the replica's other PNodes, and its update waits for theirs.
Every VNode of the replica is counted once, whichever PNode hosts it, and the sum is correctly
rounded, so the decision is the same bits on one PNode or several. The values travel as float64's
bits (int64: the wire carries no float64) so they arrive exactly as they were computed. A replica
of one PNode sends nothing.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time

import torch

from computeall.protocol.pnode_api import LoadPlan
from computeall.tensorcore.wire_formats import Encoded

from .member import InputsNeverCame
from .routing import TensorRoute, first_vnodes
from .transport import Link, Outbox

log = logging.getLogger("computeall.pnode.replica_norms")


class ReplicaNorms:
    def __init__(self, plan: LoadPlan, pnode: str, order: list[str], link: Link) -> None:
        self.session = plan.session_id
        self.micro = plan.block.start
        firsts = first_vnodes(plan.assignment, order)
        self.tag = firsts[pnode]
        self.peers = {p: vid for p, vid in firsts.items() if p != pnode}
        self.outbox = Outbox(link)
        self.inbox: dict[tuple[int, str], torch.Tensor] = {}  # (step, sender's first VNode) -> its values
        self.arrived = asyncio.Event()

    def share(self, step: int, sq_norms: dict[str, float] | None) -> None:
        """At the end of `step`'s pass: this PNode's norms (None: not finite) to the replica's other PNodes."""
        for key in [k for k in self.inbox if k[0] < step]:
            del self.inbox[key]
        values = list(sq_norms.values()) if sq_norms is not None else [math.nan]
        bits = torch.tensor(values or [0.0], dtype=torch.float64).view(torch.int64)
        for peer in sorted(self.peers):
            self.outbox.put(peer, Encoded.raw(bits), TensorRoute.norms(self.session, step, self.micro, self.tag))

    def receive(self, route: TensorRoute, tensor: torch.Tensor) -> None:
        if tensor.dtype != torch.int64 or tensor.dim() != 1:
            log.warning("dropped the gradient norms of step %d named by %s: %s of shape %s, not a vector of int64 "
                        "(float64 bits)", route.step, route.src, tensor.dtype, tuple(tensor.shape))
            return
        self.inbox[(route.step, route.src)] = tensor
        self.arrived.set()

    async def gathered(self, step: int, own: dict[str, float] | None, deadline_s: float) -> list[float]:
        """Every squared norm of the replica's VNodes for `step` (a NaN where one overflowed), once the
        other PNodes' have come; `InputsNeverCame` after `deadline_s`."""
        give_up = time.monotonic() + deadline_s
        missing = [vid for vid in self.peers.values() if (step, vid) not in self.inbox]
        while missing:
            left = give_up - time.monotonic()
            if left <= 0:
                senders = sorted(p for p, vid in self.peers.items() if vid in missing)
                raise InputsNeverCame(f"step {step}: the gradient norms of {', '.join(senders)} did not come "
                                      f"within {deadline_s:.1f}s")
            self.arrived.clear()
            try:
                await asyncio.wait_for(self.arrived.wait(), timeout=min(left, 1.0))
            except asyncio.TimeoutError:
                pass
            missing = [vid for vid in missing if (step, vid) not in self.inbox]
        theirs = [self.inbox.pop((step, vid)).view(torch.float64).tolist() for vid in self.peers.values()]
        mine = list(own.values()) if own is not None else [math.nan]
        return mine + [v for values in theirs for v in values]

    def close(self) -> None:
        self.outbox.close()
        self.arrived.set()
