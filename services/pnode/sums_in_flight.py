"""What an exchange of partial sums with the other replicas holds while its sums are in flight: the
replicas' sum of each step's gradients (`ReplicaSum`) and diloco's outer sync (`OuterSync`).

Each VNode's sum is a task (`butterfly`); the parts the other replicas send wait in the inbox until
the task takes them, the parts this PNode sends in the outbox. Abandoning the exchange cancels the
tasks and wakes whoever waits, so nothing in flight outlives it.
"""

from __future__ import annotations

import asyncio
import time
import torch

from .butterfly import Compute, SumAborted
from .member import InputsNeverCame
from .routing import PartialSumKey
from .transport import Link, Outbox


class SumsInFlight:
    what = "the exchange"  # what a part belongs to, for the errors: "the sum", "the outer sync"

    def __init__(self, link: Link, compute: Compute, give_up: float) -> None:
        self.outbox = Outbox(link)
        self.compute = compute
        self.inbox: dict[PartialSumKey, torch.Tensor] = {}
        self.arrived = asyncio.Event()
        self.tasks: dict[str, asyncio.Future] = {}  # the sums in flight, per VNode
        self.give_up = give_up  # when a part that has not arrived is given up on (`time.monotonic`)

    def _arrive(self, key: PartialSumKey, part: torch.Tensor) -> None:
        self.inbox[key] = part
        self.arrived.set()

    async def _next_arrival(self) -> bool:
        """A wait for a part: until the next one arrives or a second passes (then the caller looks again);
        False, at once, when the give-up time has passed."""
        left = self.give_up - time.monotonic()
        if left <= 0:
            return False
        self.arrived.clear()
        try:
            await asyncio.wait_for(self.arrived.wait(), timeout=min(left, 1.0))
        except asyncio.TimeoutError:
            pass
        return True

    def _abandoned(self, key: PartialSumKey) -> bool:
        """Whether the exchange `key` belongs to was given up while its part was awaited."""
        return False

    async def _take(self, key: PartialSumKey) -> torch.Tensor:
        """The other replica's part `key` once it arrived: `SumAborted` where its exchange was abandoned
        meanwhile, `InputsNeverCame` (answered `starved`: the orchestrator stalls the step and allows
        longer) once the give-up time passed."""
        while key not in self.inbox:
            if self._abandoned(key):
                raise SumAborted(f"step {key.step}: {self.what} of {key.src} was abandoned")
            if not await self._next_arrival():
                raise InputsNeverCame(f"step {key.step}: {self.what} of {key.src} over micro-batches "
                                      f"[{key.lo}, {key.hi}) did not arrive from the other replica in time")
        return self.inbox.pop(key)

    async def _all_summed(self, abandoned: str) -> None:
        """Waits for every sum in flight: `SumAborted(abandoned)` where one was cancelled, else the first failure."""
        for outcome in await asyncio.gather(*self.tasks.values(), return_exceptions=True):
            if isinstance(outcome, asyncio.CancelledError):
                raise SumAborted(abandoned)
            if isinstance(outcome, BaseException):
                raise outcome

    def _abandon(self) -> None:
        """Cancel the sums in flight, drop what was to be sent, wake whoever waits for a part."""
        for task in self.tasks.values():
            task.cancel()
        self.tasks = {}
        self.outbox.clear()
        self.arrived.set()
