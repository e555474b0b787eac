"""Where a session's VNodes live: the allocation, the plans sent to PNodes, and moving them.

Placing is: allocate on the live PNodes (the allocator is a pure function; with data-parallel
replicas one pipeline per replica, `replication.py`), record `Allocated` or `Reallocated`, and
grant exactly its PNodes the session's checkpoint bucket (`session_storage`), and send every PNode
its plan. After a loss, a standby with room takes the lost PNode's stage instead, and the others
keep theirs (`standby.py`). Loading the newest intact checkpoint onto the
new plan is the caller's next move (`Checkpoints.restore`). At a step boundary `rebalance`
only decides (a `Move`, `NoRoom`, or nothing); the step loop acts on the decision.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from computeall.network import Graph
from computeall.network.memory_model import STATE_BYTES
from computeall.protocol.config import PipelineConfig, SessionConfig
from computeall.protocol.events import Allocated, EdgeTraffic, Reallocated, VNodePlacement
from computeall.protocol.pnode_api import BatchSource, LoadPlan, ReplicaPlan

from .allocator import AllocationError
from .batch_access import BatchAccess
from .errors import DriverDone
from .network_jobs import NetworkJobs
from .pnodes import PNodeRegistry
from .recorder import SessionRecorder
from .replication import ReplicatedAllocation
from .session_pnodes import SessionPNodes
from .session_storage import SessionStorage
from .standby import take_over


# the most a checkpoint keeps of a parameter: an fp32 weight, the largest master and fp32 state's moments (16 bytes)
CHECKPOINT_BYTES_PER_PARAM = 4 + max(STATE_BYTES["fp32"].master.values()) + STATE_BYTES["fp32"].moments


@dataclass(frozen=True)
class Move:
    """Move VNodes at this step boundary, through a checkpoint of this very step."""

    allocation: ReplicatedAllocation
    reason: str
    released: list[str]  # PNodes that host nothing afterwards: unload them so a leaving one can exit


@dataclass(frozen=True)
class NoRoom:
    """PNodes are leaving and the rest cannot hold the network: checkpoint, then pause."""

    reason: str


class Placement:
    def __init__(self, recorder: SessionRecorder, registry: PNodeRegistry, pnodes: SessionPNodes,
                 jobs: NetworkJobs, graph: Graph, dataset: str, storage: SessionStorage) -> None:
        self.recorder = recorder
        self.registry = registry
        self.session_pnodes = pnodes
        self.jobs = jobs
        self.graph = graph
        self.dataset = dataset
        self.storage = storage
        self.allocation: ReplicatedAllocation | None = None
        self.plans: dict[str, LoadPlan] = {}  # by PNode: each gets its replica's
        self.batch_access = BatchAccess(pnodes.calls.nc, pnodes.calls.subjects, recorder.state.id)

    @property
    def pnodes(self) -> list[str]:
        return self.allocation.pnodes if self.allocation else []

    @property
    def config(self) -> SessionConfig:
        return self.recorder.state.config

    async def place(self, reason: str, exclude: set[str] = frozenset()) -> None:
        """Allocate on the live PNodes (but `exclude`), record it and load the plans; pauses the
        session (`DriverDone`) when they cannot hold the network. Stages of `exclude` go to standbys
        when every one finds a standby with room."""
        gone = set(exclude) | set(self.recorder.state.quarantined)
        takeover = take_over(self.allocation, gone, self.registry.capacities(gone)) if self.allocation else None
        if takeover is not None:
            await self.adopt(takeover.allocation, f"{reason}; {takeover.describe()}")
            return
        try:
            allocation = await self._allocate(set(exclude))
        except AllocationError as exc:
            await self.pause_for_capacity(str(exc))
        await self.adopt(allocation, reason)

    async def rebalance(self, at_checkpoint: bool) -> Move | NoRoom | None:
        """At a step boundary: move VNodes off leaving PNodes, and onto joined ones at a checkpoint."""
        leaving = {p for p in self.pnodes if self.registry.is_leaving(p)}
        joined = {hb.pnode for hb in self.registry.live()} - set(self.pnodes) - set(self.allocation.standbys)
        if not leaving and not (joined and at_checkpoint and self.config.rebalance == "on-join"):
            return None
        if leaving and (takeover := take_over(self.allocation, leaving, self.registry.capacities(leaving))):
            why = f"{', '.join(sorted(leaving))} leaving; {takeover.describe()}"
            return Move(takeover.allocation, why, released=sorted(leaving))
        try:
            allocation = await self._allocate(leaving)
        except AllocationError as exc:
            if not leaving:
                return None  # the joined PNodes do not make a better placement possible
            return NoRoom(f"{', '.join(sorted(leaving))} left: {exc}")
        if not leaving and allocation.assignments == self.allocation.assignments:
            return None
        kept = set(allocation.pnodes)
        reason = f"{', '.join(sorted(leaving))} leaving" if leaving else f"{', '.join(sorted(joined))} joined"
        return Move(allocation, reason, released=[p for p in self.pnodes if p not in kept])

    async def adopt(self, allocation: ReplicatedAllocation, reason: str) -> None:
        """Record the allocation, grant its PNodes (and no others) the session's checkpoints, and send
        its plan to every PNode of it."""
        fields = self._event_fields(allocation)
        if self.allocation is None:
            await self.recorder.record(Allocated(**fields))
        else:
            before = _placed(self.allocation)
            moves = {key: p for key, p in _placed(allocation).items() if before.get(key) != p}
            await self.recorder.record(Reallocated(**fields, reason=reason, moves=moves))
        self.allocation = allocation
        outer_sync_s = self._over_links_s(allocation, partial(self.config.sync.sent_bytes, replicas=allocation.count))
        checkpoint_s = self._over_links_s(allocation, lambda n: n * CHECKPOINT_BYTES_PER_PARAM, into_the_bus=True)
        # a checkpoint taken while an outer sync travels waits for it first
        self.session_pnodes.adopt(self.pnodes, allocation.replica_pnodes(0), allocation.step_time_s,
                                  checkpoint_s + outer_sync_s, outer_sync_s)
        await self.storage.host(self.pnodes, self.recorder.state.last_seq)
        config = self.config
        batches = BatchSource(
            dataset=self.dataset, split=config.data.split, seed=config.seed, micro_batch_size=config.micro_batch_size,
            context=self.graph.spec.context, validation_split=config.data.validation_split,
            validation_batches=config.validation_batches,
            start_step=config.data.start_step,
        )
        self.plans = {
            pnode: LoadPlan(
                session_id=self.recorder.state.id,
                network=self.graph.spec.model_dump(),
                assignment=allocation.assignments[r],
                seed=config.seed,
                batches=batches,
                micro_batches=config.micro_batches,
                optimizer=config.optimizer,
                pipeline=self._pipeline(allocation, r),
                verify=config.verify.on and config.replay_of is None,
                replicas=ReplicaPlan(index=r, assignments=allocation.assignments, sync=config.sync)
                if allocation.count > 1 or config.sync.mode == "diloco" else None,
            )
            for pnode in self.pnodes
            for r in [allocation.replica_of(pnode)]
        }
        await self.batch_access.give(self.dataset, self.pnodes)  # before a PNode asks for its first batch
        await self.load_plan()

    async def load_plan(self) -> None:
        """(Re)send the plans: every PNode starts from a clean, freshly initialised stage."""
        await self.session_pnodes.all(lambda p: self.plans[p], timeout=120.0, report_slow=False)

    async def pause_for_capacity(self, reason: str) -> None:
        for event in self.recorder.state.pause_for_capacity(reason):
            await self.recorder.record(event)
        raise DriverDone("paused until there is capacity again")

    async def _allocate(self, exclude: set[str]) -> ReplicatedAllocation:
        exclude = set(exclude) | set(self.recorder.state.quarantined)  # caught computing wrong results
        return await self.jobs.allocate(  # off the event loop
            self.graph, self.registry.capacities(exclude), self.config.replicas, self.config.batch_size,
            self.config.micro_batches, self.config.pipeline.stages, self.config.optimizer.state,
        )

    def _over_links_s(self, allocation: ReplicatedAllocation, sent_bytes: Callable[[int], int],
                      into_the_bus: bool = False) -> float:
        """The longest any PNode takes to send, over its measured link, `sent_bytes(parameters)` for each VNode
        it hosts (diloco's outer sync, PNode to PNode); `into_the_bus`: everything sent over the slowest link,
        since it all lands in the bus's object store (a checkpoint). On a home link, or for a 1B network on
        one machine, these outlast any fixed first deadline."""
        speed = {c.pnode: c.bandwidth_bytes_per_s for c in self.registry.capacities()}
        sent: dict[str, int] = {}
        for assignment in allocation.assignments:
            for vid, pnode in assignment.items():
                sent[pnode] = sent.get(pnode, 0) + sent_bytes(self.graph.param_count(vid))
        measured = [p for p in sent if speed.get(p)]
        if into_the_bus:
            return sum(sent[p] for p in measured) / min(speed[p] for p in measured) if measured else 0.0
        return max((sent[p] / speed[p] for p in measured), default=0.0)

    def _pipeline(self, allocation: ReplicatedAllocation, replica: int) -> PipelineConfig:
        """The session's pipeline, with the micro-batches in flight the allocation decided for this
        replica's links (`in_flight.py`) unless the session fixed them."""
        if self.config.pipeline.in_flight is not None:
            return self.config.pipeline
        return self.config.pipeline.model_copy(update={"in_flight": allocation.replicas[replica].in_flight})

    def _event_fields(self, allocation: ReplicatedAllocation) -> dict:
        graph, batch = self.graph, self.config.batch_size // allocation.count
        placements, edges = [], []
        for r, assignment in enumerate(allocation.assignments):
            placements += [
                VNodePlacement(vnode=v, op=graph.vnodes[v].op, pnode=assignment[v], params=graph.param_count(v),
                               precision=graph.vnodes[v].precision, replica=r)
                for v in graph.order
            ]
            crossing = {
                (e.src, e.dst): graph.edge_bytes_per_step(e, batch)
                for e in graph.edges
                if e.src in assignment and assignment[e.src] != assignment[e.dst]
            }
            edges += [EdgeTraffic(src=s, dst=d, bytes_per_step=b, replica=r) for (s, d), b in crossing.items()]
        return dict(
            placements=placements, edges=edges, pnodes=allocation.pnodes,
            bytes_across_per_step=allocation.bytes_across_per_step, replicas=allocation.count,
            estimated_step_s=allocation.step_time_s, standbys=allocation.standbys,
            in_flight=[self._pipeline(allocation, r).in_flight for r in range(allocation.count)],
        )


def _placed(allocation: ReplicatedAllocation) -> dict[str, str]:
    """Where each VNode of each replica lives, keyed `vnode` in replica 0 and `vnode@r` in replica r."""
    return {(v if r == 0 else f"{v}@{r}"): p for r, a in enumerate(allocation.assignments) for v, p in a.items()}
