"""diloco's outer syncs on one PNode: every `inner_steps`, the replicas meet over their pseudo-gradients.

After the inner update of a step that ends a round (`ReplicaSync.is_outer_step`), `after_update`
takes each hosted VNode's pseudo-gradient (anchor - parameters) at once, then lets the sync travel
in the background: for each VNode, the message (sparse, `compression`: the top entries with error
feedback, made here on the compute thread) or the dense pseudo-gradient goes over the butterfly
with the PNodes hosting that VNode in the other replicas (`butterfly.gathered` / `summed`), and the
outer step is computed once everything arrived (`OuterOptimizer.step`). The outer step lands after
the update of the step `overlap_steps` later (`ReplicaSync.lands_after`): the PNode waits there
for whatever has not arrived yet. The steps in between train while the sync travels, so a slow
link costs nothing as long as it delivers within them; and since where the step lands never
depends on when the bytes came, the bits do not either.

The sync has its own outbox and inbox: the next steps' passes, which clear theirs when they start,
never touch it. Only a new plan (`close`) or a checkpoint loaded over it (`close`) abandons it; a
checkpoint saved during the overlap waits for it to arrive (`settled`), so the object holds the step
still to land (`OuterOptimizer.landing`) rather than a sync half done.
"""

from __future__ import annotations

import asyncio
import math
import time

import torch

from computeall.protocol.micro_tree import Exchange
from computeall.protocol.pnode_api import LoadPlan
from computeall.tensorcore.diloco import OuterOptimizer
from computeall.tensorcore.optimizer import VNodeOptimizer
from computeall.tensorcore.sparse_sync import BadMessage, decoded_sum
from computeall.tensorcore.vnode_runtime import VNodeRuntime
from computeall.tensorcore.wire_formats import Encoded, wire_format

from . import butterfly
from .butterfly import Compute, SumAborted
from .sums_in_flight import SumsInFlight
from .transport import Link
from .routing import PartialSumKey, TensorRoute


class OuterSync(SumsInFlight):
    what = "the outer sync"

    def __init__(self, plan: LoadPlan, runtime: VNodeRuntime, optimizer: VNodeOptimizer, link: Link,
                 compute: Compute) -> None:
        self.session = plan.session_id
        self.sync = plan.replicas.sync
        self.assignments = plan.replicas.assignments
        self.exchanges: list[Exchange] = plan.exchanges
        self.owned = {vid: runtime.gradients.owned[vid] for vid in runtime.order if runtime.gradients.owned.get(vid)}
        self.outer = OuterOptimizer(optimizer, self.sync)
        super().__init__(link, compute, give_up=math.inf)  # until the step lands, the sync may take its time
        self.started = -1  # the step whose sync is in flight (or landed last)

    def receive(self, route: TensorRoute, tensor: torch.Tensor) -> None:
        self._arrive(route.inbox_key, tensor)

    async def after_update(self, step: int, deadline_s: float) -> int:
        """After `step`'s inner update: start a sync when it ends a round, land the outer step due
        after it; the bytes this PNode sent for a sync that landed."""
        if self.sync.is_outer_step(step):
            await self._start(step)
        return await self._land(deadline_s) if self.sync.lands_after(step) else 0

    async def settled(self, deadline_s: float) -> None:
        """The sync in flight has arrived and its outer step waits to land (before a checkpoint)."""
        if self.tasks:
            self.give_up = min(self.give_up, time.monotonic() + deadline_s)
            await self._arrival()

    def close(self) -> None:
        """Abandon the sync in flight (a new plan, or a checkpoint loaded over this state)."""
        self._abandon()
        self.inbox.clear()

    # -- one sync ----------------------------------------------------------------------------
    async def _start(self, step: int) -> None:
        if self.tasks:
            raise SumAborted(f"step {step}: the outer sync of step {self.started} never landed")
        self.started, self.give_up = step, math.inf
        for key in [k for k in self.inbox if k.step < step]:
            del self.inbox[key]

        def pseudo_gradients() -> dict[str, torch.Tensor]:
            return {vid: self.outer.pseudo_gradient(names) for vid, names in self.owned.items()}

        deltas = await self.compute(pseudo_gradients)  # now: the next steps move the parameters
        self.tasks = {vid: asyncio.ensure_future(self._sync(step, vid, delta)) for vid, delta in deltas.items()}

    async def _sync(self, step: int, vid: str, delta: torch.Tensor) -> None:
        names = self.owned[vid]
        what = f"step {step}: the outer sync of {vid}"

        def send(exchange: Exchange, encoded: Encoded) -> None:
            route = TensorRoute.outer_sync(self.session, step, vid, *exchange.mine)
            self.outbox.put(self.assignments[exchange.partner][vid], encoded, route)

        async def take(exchange: Exchange) -> torch.Tensor:
            return await self._take(PartialSumKey("train", step, vid, *exchange.theirs))

        compression = self.sync.compression
        if compression is None:
            total = await butterfly.summed(what, self.exchanges, delta, send, take, self.compute,
                                           wire_format(self.sync.wire))
        else:
            message = await self.compute(self.outer.message, names, delta)
            messages = await butterfly.gathered(what, self.exchanges, message, send, take)
            try:
                total = await self.compute(decoded_sum, messages, delta.numel(), compression)
            except BadMessage as exc:
                raise SumAborted(f"{what}: {exc}") from None
        await self.compute(self.outer.step, names, total, len(self.assignments), delta)

    async def _land(self, deadline_s: float) -> int:
        self.give_up = min(self.give_up, time.monotonic() + deadline_s)
        await self._arrival()
        self.tasks = {}
        traffic = await self.outbox.flush()
        if self.sync.overlap_steps:
            await self.compute(self.outer.land, [n for names in self.owned.values() for n in names])
        return sum(traffic.sent_bytes.values())

    async def _arrival(self) -> None:
        await self._all_summed(f"the outer sync of step {self.started} was abandoned")
