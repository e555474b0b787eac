"""Data-parallel replicas of the pipeline: how many, and which PNodes each one gets.

A pure function like the allocator it calls: the live PNodes are dealt into R groups (by memory,
largest first, round robin, so each group gets a similar share), and each group gets its own
pipeline allocation of the whole network for its share of the batch. `replicas: auto` takes the
largest replica count the micro-batches allow (`micro_tree.replica_counts`) for which every group
can hold the network; a fixed count that the PNodes cannot hold is an `AllocationError` (the
session pauses for capacity, as without replicas).
"""

from __future__ import annotations

from dataclasses import dataclass

from computeall.network import Graph
from computeall.protocol.micro_tree import replica_counts
from computeall.protocol.replica_sync import Replicas

from .allocator import Allocation, AllocationError, PNodeCapacity, Stage, allocate


@dataclass(frozen=True)
class ReplicatedAllocation:
    replicas: tuple[Allocation, ...]  # one pipeline per replica, in replica order

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
        return [s.pnode for s in self.stages]

    @property
    def bytes_across_per_step(self) -> int:
        """Activations and their gradients between PNodes, over every replica (not the replica sums)."""
        return sum(r.bytes_across_per_step for r in self.replicas)

    def replica_of(self, pnode: str) -> int:
        return next(i for i, r in enumerate(self.replicas) if any(s.pnode == pnode for s in r.stages))

    def replica_pnodes(self, replica: int) -> list[str]:
        return [s.pnode for s in self.replicas[replica].stages]


def allocate_replicas(graph: Graph, pnodes: list[PNodeCapacity], replicas: Replicas, batch_size: int,
                      micro_batches: int) -> ReplicatedAllocation:
    micro_batch_size = batch_size // micro_batches
    if replicas == "auto":
        counts = replica_counts(micro_batches, at_most=max(1, len(pnodes)))
        for count in reversed(counts[1:]):
            try:
                return _allocate(graph, pnodes, count, batch_size, micro_batch_size)
            except AllocationError:
                continue
        return _allocate(graph, pnodes, 1, batch_size, micro_batch_size)
    if len(pnodes) < replicas:
        raise AllocationError(
            f"{replicas} replicas need at least {replicas} PNodes (one pipeline each) and {len(pnodes)} are live; "
            "add PNodes, or use fewer replicas (or replicas: auto)"
        )
    return _allocate(graph, pnodes, replicas, batch_size, micro_batch_size)


def _allocate(graph: Graph, pnodes: list[PNodeCapacity], count: int, batch_size: int,
              micro_batch_size: int) -> ReplicatedAllocation:
    ordered = sorted(pnodes, key=lambda p: (-p.memory_bytes, p.pnode))
    groups = [ordered[r::count] for r in range(count)]
    pipelines = []
    for r, group in enumerate(groups):
        try:
            pipelines.append(allocate(graph, group, batch_size // count, micro_batch_size))
        except AllocationError as exc:
            raise AllocationError(f"replica {r} of {count}: {exc}") from None
    return ReplicatedAllocation(tuple(pipelines))
