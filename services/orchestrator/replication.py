"""Data-parallel replicas of the pipeline: how many, and which PNodes each one gets.

A pure function like the allocator it calls. The live PNodes are dealt into R groups, round robin
down a ranking, and each group gets its own pipeline allocation of the whole network for its
share of the batch. Three rankings are tried: by memory (largest first), by link bandwidth and by
FLOP/s (fastest first, memory next), so each group gets a similar share of what is scarce; the
grouping with the least estimated step time wins, earlier rankings on ties (with no PNode
measured, every estimate ties and the memory ranking is today's placement). The estimate is the
slowest replica's pipeline (`Allocation.step_time_s`) plus the replicas' gradient sums
(`sum_time_s`): so replicas of the same VNode, which exchange its gradient every step, land on
PNodes with good links to each other, and a slow link is not where the large VNodes are summed.

`replicas: auto` takes the largest replica count the micro-batches allow (`micro_tree.replica_counts`)
for which every group can hold the network; a fixed count that the PNodes cannot hold is an
`AllocationError` (the session pauses for capacity, as without replicas). Each group is cut into
the session's `pipeline.stages` (allocator.py); the PNodes of a group left without a stage are
the allocation's standbys.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from computeall.network import Graph
from computeall.network.graph import BYTES_PER_ELEMENT
from computeall.protocol.config import OptimizerState, Stages
from computeall.protocol.micro_tree import exchanges, replica_counts
from computeall.protocol.replica_sync import Replicas

from .allocator import Allocation, AllocationError, PNodeCapacity, Stage, allocate

# the orders PNodes are dealt in, best first within each; ties keep the order before (by name last)
RANKINGS: dict[str, Callable[[PNodeCapacity], tuple]] = {
    "memory": lambda p: (-p.memory_bytes, p.pnode),
    "link": lambda p: (-p.bandwidth_bytes_per_s, p.rtt_s, -p.memory_bytes, p.pnode),
    "compute": lambda p: (-p.flops_per_s, -p.memory_bytes, p.pnode),
}


@dataclass(frozen=True)
class ReplicatedAllocation:
    replicas: tuple[Allocation, ...]  # one pipeline per replica, in replica order
    sum_s: float = 0.0  # estimated seconds a step spends summing gradients over the replicas (`sum_time_s`)

    @property
    def count(self) -> int:
        return len(self.replicas)

    @property
    def assignments(self) -> list[dict[str, str]]:
        return [r.assignment for r in self.replicas]

    @property
    def stages(self) -> tuple[Stage, ...]:
        return tuple(s for r in self.replicas for s in r.stages)

    @property
    def pnodes(self) -> list[str]:
        """The PNodes that host a stage."""
        return [s.pnode for s in self.stages]

    @property
    def standbys(self) -> list[str]:
        """The PNodes offered that host nothing: each can take a lost PNode's stage as it was (`standby.py`)."""
        return [p for r in self.replicas for p in r.standbys]

    @property
    def bytes_across_per_step(self) -> int:
        """Activations and their gradients between PNodes, over every replica (not the replica sums)."""
        return sum(r.bytes_across_per_step for r in self.replicas)

    @property
    def step_time_s(self) -> float:
        """The estimated step: the slowest replica's pipeline, then the sums (an upper bound: they
        overlap the backward pass but for the last VNode's)."""
        return max(r.step_time_s for r in self.replicas) + self.sum_s

    def replica_of(self, pnode: str) -> int:
        return next(i for i, r in enumerate(self.replicas) if any(s.pnode == pnode for s in r.stages))

    def replica_pnodes(self, replica: int) -> list[str]:
        return [s.pnode for s in self.replicas[replica].stages]


def allocate_replicas(graph: Graph, pnodes: list[PNodeCapacity], replicas: Replicas, batch_size: int,
                      micro_batches: int, stages: Stages = "auto", state: OptimizerState = "fp32") -> ReplicatedAllocation:
    """`stages`: the session's `pipeline.stages`; `state`: its optimizer state, what each parameter costs a PNode
    (the memory model's)."""
    micro_batch_size = batch_size // micro_batches
    if replicas == "auto":
        counts = replica_counts(micro_batches, at_most=max(1, len(pnodes)))
        for count in reversed(counts[1:]):
            try:
                return _allocate(graph, pnodes, count, batch_size, micro_batch_size, stages, state)
            except AllocationError:
                continue
        return _allocate(graph, pnodes, 1, batch_size, micro_batch_size, stages, state)
    if len(pnodes) < replicas:
        raise AllocationError(
            f"{replicas} replicas need at least {replicas} PNodes (one pipeline each) and {len(pnodes)} are live; "
            "add PNodes, or use fewer replicas (or replicas: auto)"
        )
    return _allocate(graph, pnodes, replicas, batch_size, micro_batch_size, stages, state)


def _allocate(graph: Graph, pnodes: list[PNodeCapacity], count: int, batch_size: int,
              micro_batch_size: int, stages: Stages, state: OptimizerState) -> ReplicatedAllocation:
    if count == 1:
        return ReplicatedAllocation((allocate(graph, pnodes, batch_size, micro_batch_size, stages=stages, state=state),))
    best: ReplicatedAllocation | None = None
    failure: AllocationError | None = None
    tried: set[tuple] = set()
    for rank in RANKINGS.values():
        groups = _deal(pnodes, count, rank)
        grouping = tuple(tuple(p.pnode for p in g) for g in groups)
        if grouping in tried:
            continue  # another ranking dealt the same groups (always so while no PNode has measured itself)
        tried.add(grouping)
        try:
            pipelines = tuple(_pipeline(graph, g, r, count, batch_size, micro_batch_size, stages, state)
                              for r, g in enumerate(groups))
        except AllocationError as exc:
            failure = failure or exc
            continue
        candidate = ReplicatedAllocation(pipelines, sum_time_s(graph, pnodes, [p.assignment for p in pipelines]))
        if best is None or candidate.step_time_s < best.step_time_s:
            best = candidate
    if best is None:
        raise failure
    return best


def _deal(pnodes: list[PNodeCapacity], count: int, rank: Callable[[PNodeCapacity], tuple]) -> list[list[PNodeCapacity]]:
    ordered = sorted(pnodes, key=rank)
    return [ordered[r::count] for r in range(count)]


def _pipeline(graph: Graph, group: list[PNodeCapacity], replica: int, count: int, batch_size: int,
              micro_batch_size: int, stages: Stages, state: OptimizerState) -> Allocation:
    try:
        return allocate(graph, group, batch_size // count, micro_batch_size, stages=stages, state=state)
    except AllocationError as exc:
        raise AllocationError(f"replica {replica} of {count}: {exc}") from None


def sum_time_s(graph: Graph, pnodes: list[PNodeCapacity], assignments: list[dict[str, str]]) -> float:
    """Seconds the replicas' gradient sums keep the busiest PNode's link busy per step.

    Each VNode's gradient crosses once per level of the butterfly (`micro_tree.exchanges`), each way,
    between the PNodes hosting it in two replicas, at the slower of their two links. Sums of
    different VNodes run at once, so the round trips count once per level, the bytes add up.
    """
    speed = {p.pnode: p for p in pnodes}
    busy: dict[str, float] = {}
    levels = 0
    count = len(assignments)
    for r, assignment in enumerate(assignments):
        rounds = exchanges(count, count, r)  # the partners depend on the replica count alone
        levels = len(rounds)
        for vid, pnode in assignment.items():
            nbytes = graph.param_count(vid) * BYTES_PER_ELEMENT[graph.vnodes[vid].precision]
            for exchange in rounds:
                partner = speed[assignments[exchange.partner][vid]]
                bandwidth = min(speed[pnode].bandwidth_bytes_per_s, partner.bandwidth_bytes_per_s)
                busy[pnode] = busy.get(pnode, 0.0) + nbytes / bandwidth
    if not busy:
        return 0.0
    return max(busy.values()) + levels * max(speed[p].rtt_s for p in busy)
