"""How this stage's replicas keep together: a step's gradients summed over the data-parallel replicas,
PNode to PNode, along the micro-batch tree; or diloco's outer syncs (`outer_sync.py`).

Each replica sums its own block of micro-batches (`MicroGradients`). As soon as a VNode's block sum
is final, this PNode runs the butterfly of `micro_tree.exchanges` for it with the PNodes hosting
that VNode in the other replicas (`butterfly.summed`): at each level it sends its partial sum (the
VNode's parameter gradients as one flat tensor), receives its partner's, and both add left + right.
After log2(R) levels every replica holds the step's gradient, with the bits of one replica summing
everything, and applies the same update. The sums of different VNodes overlap each other and the
rest of the backward pass; nothing goes through the orchestrator. The sums travel through an outbox
of their own (not the pass's), so their bytes are counted apart from activations'. With diloco
nothing is summed per step: `outer_step` hands each step's end to the outer sync.
"""

from __future__ import annotations

import asyncio
import time

import torch

from computeall.protocol.micro_tree import Exchange
from computeall.protocol.pnode_api import LoadPlan
from computeall.tensorcore.diloco import OuterOptimizer
from computeall.tensorcore.optimizer import VNodeOptimizer
from computeall.tensorcore.vnode_runtime import VNodeRuntime
from computeall.tensorcore.wire_formats import Encoded

from . import butterfly
from .butterfly import Compute
from .sums_in_flight import SumsInFlight
from .outer_sync import OuterSync
from .transport import Link
from .routing import PartialSumKey, TensorRoute

def flatten(grads: list[torch.Tensor]) -> torch.Tensor:
    dtypes = {g.dtype for g in grads}
    if len(dtypes) != 1:
        raise ValueError(f"a VNode's parameters share one precision; these gradients have {sorted(map(str, dtypes))}")
    return torch.cat([g.reshape(-1) for g in grads])


class ReplicaSum(SumsInFlight):
    what = "the sum"

    def __init__(self, plan: LoadPlan, runtime: VNodeRuntime, optimizer: VNodeOptimizer, link: Link,
                 compute: Compute) -> None:
        self.session = plan.session_id
        self.runtime = runtime
        super().__init__(link, compute, give_up=0.0)
        replicas = plan.replicas
        self.assignments = replicas.assignments if replicas else [plan.assignment]
        self.exchanges: list[Exchange] = plan.exchanges
        self.sync = replicas.sync if replicas else None
        diloco = self.sync is not None and self.sync.mode == "diloco"
        self.outer_sync = OuterSync(plan, runtime, optimizer, link, compute) if diloco else None
        self.step = -1

    @property
    def sums_gradients(self) -> bool:
        """Each step's gradients are summed over the replicas (not diloco, not one replica alone)."""
        return self.sync is not None and self.sync.mode == "gradients"

    @property
    def outer(self) -> OuterOptimizer | None:
        """diloco's outer state (part of each VNode's checkpoint), or None."""
        return self.outer_sync.outer if self.outer_sync else None

    def receive(self, route: TensorRoute, tensor: torch.Tensor) -> None:
        if route.kind == "outer":
            if self.outer_sync is not None:
                self.outer_sync.receive(route, tensor)
            return
        if route.step < self.step:
            return  # of a step already summed or abandoned
        self._arrive(route.inbox_key, tensor)

    def begin(self, step: int, deadline_s: float) -> None:
        self.abort()
        self.step, self.give_up = step, time.monotonic() + deadline_s
        for key in [k for k in self.inbox if k.step < step]:
            del self.inbox[key]

    def summand(self, vid: str) -> torch.Tensor | None:
        """On the compute thread, right after a backward of `vid`: its block's gradient as one flat
        tensor once it is complete, else None. Taken there, between two work items, so its first
        send leaves while the rest of the backward pass computes (the pass holds the compute thread
        until it ends: a flatten queued behind it would start every sum after the whole pass)."""
        if not self._ready_to_sum(vid):
            return None
        params = self.runtime.gradients.params
        grads = [params[n].grad for n in self.runtime.gradients.owned[vid] if params[n].grad is not None]
        return flatten(grads) if grads else None

    def start(self, step: int, vid: str, flat: torch.Tensor | None = None) -> None:
        """Start summing `vid`'s gradient over the replicas (from `summand`, or flattened here)."""
        if step == self.step and vid not in self.tasks and self._ready_to_sum(vid):
            self.tasks[vid] = asyncio.ensure_future(self._sum(step, vid, flat))

    def _ready_to_sum(self, vid: str) -> bool:
        gradients = self.runtime.gradients
        return self.sums_gradients and bool(gradients.owned.get(vid)) and gradients.complete(vid)

    async def finish(self) -> int:
        """Every VNode's gradient summed over the replicas; the bytes this PNode sent for it."""
        for vid in self.runtime.order:  # those whose gradient completed only at the pass's end
            self.start(self.step, vid)
        await self._all_summed(f"step {self.step}: the sum over the replicas was abandoned")
        traffic = await self.outbox.flush()
        return sum(traffic.sent_bytes.values())

    def abort(self) -> None:
        self._abandon()

    def close(self) -> None:
        """The stage is let go or its state replaced: nothing in flight goes on, diloco's sync included."""
        self.abort()
        if self.outer_sync is not None:
            self.outer_sync.close()

    async def settled(self, deadline_s: float) -> None:
        """diloco: the outer sync in flight has arrived (waiting at most `deadline_s`), so a checkpoint holds
        its step still to land."""
        if self.outer_sync is not None:
            await self.outer_sync.settled(deadline_s)

    async def outer_step(self, step: int, deadline_s: float) -> int:
        """diloco, after `step`'s inner update: start or land an outer sync, waiting at most `deadline_s`
        for the other replicas' parts; the bytes this PNode sent."""
        if self.outer_sync is None:
            return 0
        return await self.outer_sync.after_update(step, deadline_s)

    async def _sum(self, step: int, vid: str, flat: torch.Tensor | None) -> None:
        params = self.runtime.gradients.params
        names = [n for n in self.runtime.gradients.owned[vid] if params[n].grad is not None]
        if not names:
            return  # no gradient anywhere (the same on every replica: it is the graph's doing)
        if flat is None:
            flat = await self.compute(flatten, [params[n].grad for n in names])

        def send(exchange: Exchange, encoded: Encoded) -> None:
            route = TensorRoute.partial_sum(self.session, step, vid, *exchange.mine)
            self.outbox.put(self.assignments[exchange.partner][vid], encoded, route)

        async def take(exchange: Exchange) -> torch.Tensor:
            return await self._take(PartialSumKey("train", step, vid, *exchange.theirs))

        total = await butterfly.summed(f"step {step}: the sum of {vid}'s gradients", self.exchanges, flat, send, take,
                                       self.compute)
        offset = 0
        for n in names:
            p = params[n]
            p.grad = total[offset: offset + p.numel()].view_as(p)
            offset += p.numel()

    def _abandoned(self, key: PartialSumKey) -> bool:
        return self.step != key.step  # the pass moved on to another step
