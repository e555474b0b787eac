"""Where a session's VNodes live: the allocation, the plans sent to PNodes, and moving them.

Placing is: allocate on the live PNodes (the allocator is a pure function), record `Allocated`
or `Reallocated`, send every PNode its plan, then load the newest intact checkpoint.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from computeall.network import Graph
from computeall.protocol.events import Allocated, EdgeTraffic, Reallocated, SessionPaused, VNodePlacement
from computeall.protocol.pnode_api import BatchSource, LoadPlan, Unload

from .allocator import Allocation, AllocationError, PNodeCapacity, allocate
from .errors import DriverDone, PNodeFailure, SessionError

if TYPE_CHECKING:
    from .driver import SessionDriver

log = logging.getLogger("computeall.orchestrator.placement")


class Placement:
    def __init__(self, driver: "SessionDriver", graph: Graph, dataset: str) -> None:
        self.driver = driver
        self.graph = graph
        self.dataset = dataset
        self.allocation: Allocation | None = None
        self.plan: LoadPlan | None = None
        self.generations: dict[str, int] = {}  # the PNode incarnations that hold the plan

    @property
    def pnodes(self) -> list[str]:
        return [s.pnode for s in self.allocation.stages] if self.allocation else []

    @property
    def config(self):
        return self.driver.state.config

    def _allocate(self, exclude: set[str]) -> Allocation:
        live = [hb for hb in self.driver.registry.live() if hb.pnode not in exclude]
        return allocate(
            self.graph, [PNodeCapacity(hb.pnode, hb.memory_bytes) for hb in live],
            self.config.batch_size, self.config.micro_batch_size,
        )

    async def place(self, reason: str, exclude: set[str] = frozenset()) -> int:
        """Allocate, record it, load plans and the newest checkpoint; the step to continue from."""
        try:
            allocation = self._allocate(set(exclude))
        except AllocationError as exc:
            await self._pause_for_capacity(str(exc))
        await self._adopt(allocation, reason)
        return await self.driver.restore()

    async def rebalance(self, step: int, at_checkpoint: bool) -> None:
        """At a step boundary: move VNodes off leaving PNodes, and onto joined ones at a checkpoint.

        The state moves through a checkpoint of this very step, so nothing is rolled back.
        """
        registry = self.driver.registry
        leaving = {p for p in self.pnodes if registry.is_leaving(p)}
        joined = {hb.pnode for hb in registry.live()} - set(self.pnodes)
        if not leaving and not (joined and at_checkpoint and self.config.rebalance == "on-join"):
            return
        try:
            allocation = self._allocate(leaving)
        except AllocationError as exc:
            if not leaving:
                return  # the joined PNodes do not make a better placement possible
            await self.driver.checkpoint(step)
            await self._pause_for_capacity(f"{', '.join(sorted(leaving))} left: {exc}")
        if not leaving and allocation.assignment == self.allocation.assignment:
            return
        await self.driver.checkpoint(step)
        gone = [p for p in self.pnodes if p not in {s.pnode for s in allocation.stages}]
        reason = f"{', '.join(sorted(leaving))} leaving" if leaving else f"{', '.join(sorted(joined))} joined"
        await self._adopt(allocation, reason)
        restored = await self.driver.restore()
        if restored != step:
            raise SessionError(f"could not move the state of step {step} (the newest intact checkpoint is {restored})")
        for pnode in gone:  # a leaving PNode exits once it hosts nothing
            try:
                await self.driver.calls.one(pnode, Unload(session_id=self.driver.state.id), timeout=10.0)
            except (SessionError, PNodeFailure):
                pass

    async def _adopt(self, allocation: Allocation, reason: str) -> None:
        fields = self._event_fields(allocation)
        if self.allocation is None:
            await self.driver.record(Allocated(**fields))
        else:
            moves = {v: p for v, p in allocation.assignment.items() if self.allocation.assignment.get(v) != p}
            await self.driver.record(Reallocated(**fields, reason=reason, moves=moves))
        self.allocation = allocation
        self.generations = {p: self.driver.registry.generation(p) for p in self.pnodes}
        config = self.config
        self.plan = LoadPlan(
            session_id=self.driver.state.id,
            network=self.graph.spec.model_dump(),
            assignment=allocation.assignment,
            seed=config.seed,
            batches=BatchSource(
                dataset=self.dataset, split=config.data.split, seed=config.seed, micro_batch_size=config.micro_batch_size,
                context=self.graph.spec.context, validation_split=config.data.validation_split,
            ),
            micro_batches=config.micro_batches,
            optimizer=config.optimizer,
        )
        await self.load_plan()

    async def load_plan(self) -> None:
        await self.driver.calls.all(self.pnodes, lambda p: self.plan, timeout=120.0, generations=self.generations)

    async def _pause_for_capacity(self, reason: str) -> None:
        at = self.driver.state.last_checkpoint.step if self.driver.state.last_checkpoint else 0
        await self.driver.record(SessionPaused(step=at, reason=f"not enough capacity: {reason}", auto_resume=True))
        raise DriverDone("paused until there is capacity again")

    def _event_fields(self, allocation: Allocation) -> dict:
        graph, batch = self.graph, self.config.batch_size
        crossing = {
            (e.src, e.dst): graph.edge_bytes_per_step(e, batch)
            for e in graph.edges
            if e.src in allocation.assignment and allocation.assignment[e.src] != allocation.assignment[e.dst]
        }
        return dict(
            placements=[
                VNodePlacement(vnode=v, op=graph.vnodes[v].op, pnode=allocation.assignment[v],
                               params=graph.param_count(v), precision=graph.vnodes[v].precision)
                for v in graph.order
            ],
            edges=[EdgeTraffic(src=s, dst=d, bytes_per_step=b) for (s, d), b in crossing.items()],
            pnodes=[s.pnode for s in allocation.stages],
            bytes_across_per_step=allocation.bytes_across_per_step,
        )
