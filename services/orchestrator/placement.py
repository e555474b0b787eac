"""Where a session's VNodes live: the allocation, the plans sent to PNodes, and moving them.

Placing is: allocate on the live PNodes (the allocator is a pure function), record `Allocated`
or `Reallocated`, and send every PNode its plan. Loading the newest intact checkpoint onto the
new plan is the caller's next move (`Checkpoints.restore`). At a step boundary `rebalance`
only decides (a `Move`, `NoRoom`, or nothing); the step loop acts on the decision.
"""

from __future__ import annotations

from dataclasses import dataclass

from computeall.network import Graph
from computeall.protocol.config import SessionConfig
from computeall.protocol.events import Allocated, EdgeTraffic, Reallocated, VNodePlacement
from computeall.protocol.pnode_api import BatchSource, LoadPlan

from .allocator import Allocation, AllocationError
from .errors import DriverDone
from .network_jobs import NetworkJobs
from .pnodes import PNodeRegistry
from .recorder import SessionRecorder
from .session_pnodes import SessionPNodes


@dataclass(frozen=True)
class Move:
    """Move VNodes at this step boundary, through a checkpoint of this very step."""

    allocation: Allocation
    reason: str
    released: list[str]  # PNodes that host nothing afterwards: unload them so a leaving one can exit


@dataclass(frozen=True)
class NoRoom:
    """PNodes are leaving and the rest cannot hold the network: checkpoint, then pause."""

    reason: str


class Placement:
    def __init__(self, recorder: SessionRecorder, registry: PNodeRegistry, pnodes: SessionPNodes,
                 jobs: NetworkJobs, graph: Graph, dataset: str) -> None:
        self.recorder = recorder
        self.registry = registry
        self.session_pnodes = pnodes
        self.jobs = jobs
        self.graph = graph
        self.dataset = dataset
        self.allocation: Allocation | None = None
        self.plan: LoadPlan | None = None

    @property
    def pnodes(self) -> list[str]:
        return [s.pnode for s in self.allocation.stages] if self.allocation else []

    @property
    def config(self) -> SessionConfig:
        return self.recorder.state.config

    async def place(self, reason: str, exclude: set[str] = frozenset()) -> None:
        """Allocate on the live PNodes (but `exclude`), record it and load the plans; pauses the
        session (`DriverDone`) when they cannot hold the network."""
        try:
            allocation = await self._allocate(set(exclude))
        except AllocationError as exc:
            await self.pause_for_capacity(str(exc))
        await self.adopt(allocation, reason)

    async def rebalance(self, at_checkpoint: bool) -> Move | NoRoom | None:
        """At a step boundary: move VNodes off leaving PNodes, and onto joined ones at a checkpoint."""
        leaving = {p for p in self.pnodes if self.registry.is_leaving(p)}
        joined = {hb.pnode for hb in self.registry.live()} - set(self.pnodes)
        if not leaving and not (joined and at_checkpoint and self.config.rebalance == "on-join"):
            return None
        try:
            allocation = await self._allocate(leaving)
        except AllocationError as exc:
            if not leaving:
                return None  # the joined PNodes do not make a better placement possible
            return NoRoom(f"{', '.join(sorted(leaving))} left: {exc}")
        if not leaving and allocation.assignment == self.allocation.assignment:
            return None
        kept = {s.pnode for s in allocation.stages}
        reason = f"{', '.join(sorted(leaving))} leaving" if leaving else f"{', '.join(sorted(joined))} joined"
        return Move(allocation, reason, released=[p for p in self.pnodes if p not in kept])

    async def adopt(self, allocation: Allocation, reason: str) -> None:
        """Record the allocation and send its plan to every PNode of it."""
        fields = self._event_fields(allocation)
        if self.allocation is None:
            await self.recorder.record(Allocated(**fields))
        else:
            moves = {v: p for v, p in allocation.assignment.items() if self.allocation.assignment.get(v) != p}
            await self.recorder.record(Reallocated(**fields, reason=reason, moves=moves))
        self.allocation = allocation
        self.session_pnodes.adopt(self.pnodes)
        config = self.config
        self.plan = LoadPlan(
            session_id=self.recorder.state.id,
            network=self.graph.spec.model_dump(),
            assignment=allocation.assignment,
            seed=config.seed,
            batches=BatchSource(
                dataset=self.dataset, split=config.data.split, seed=config.seed, micro_batch_size=config.micro_batch_size,
                context=self.graph.spec.context, validation_split=config.data.validation_split,
                start_step=config.data.start_step,
            ),
            micro_batches=config.micro_batches,
            optimizer=config.optimizer,
            pipeline=config.pipeline,
            verify=config.verify.on and config.replay_of is None,
        )
        await self.load_plan()

    async def load_plan(self) -> None:
        """(Re)send the plan: every PNode starts from a clean, freshly initialised stage."""
        await self.session_pnodes.all(lambda p: self.plan, timeout=120.0, report_slow=False)

    async def pause_for_capacity(self, reason: str) -> None:
        for event in self.recorder.state.pause_for_capacity(reason):
            await self.recorder.record(event)
        raise DriverDone("paused until there is capacity again")

    async def _allocate(self, exclude: set[str]) -> Allocation:
        exclude = set(exclude) | set(self.recorder.state.quarantined)  # caught computing wrong results
        return await self.jobs.allocate(  # off the event loop
            self.graph, self.registry.capacities(exclude), self.config.batch_size, self.config.micro_batch_size,
        )

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
            estimated_step_s=allocation.step_time_s,
        )
