"""A standby takes a lost PNode's stage as it was.

An allocation's standbys are PNodes offered to the session that host nothing: one more stage would
not have shortened the step (allocator.py). When a PNode that hosts a stage is lost (or quarantined),
a live standby with the memory for that stage takes its VNodes as they were, and every other PNode
keeps its own: nothing is allocated again, and the rollback to the last checkpoint that follows
loads the same stages as before, but for the newcomer's. Placement is never part of the math, so
the steps run again give the same bits.

A pure function, like the allocator. The allocation keeps the estimate it was made with (a standby
slower than the PNode it replaces makes the step slower than that); the next rebalance at a
checkpoint (`rebalance: on-join`) allocates afresh.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from .allocator import Allocation, PNodeCapacity
from .replication import ReplicatedAllocation


@dataclass(frozen=True)
class Takeover:
    allocation: ReplicatedAllocation
    taken: dict[str, str]  # lost PNode -> the standby that took its stage

    def describe(self) -> str:
        return ", ".join(f"standby {new} took {old}'s stage" for old, new in sorted(self.taken.items()))


def take_over(allocation: ReplicatedAllocation, gone: set[str], live: list[PNodeCapacity]) -> Takeover | None:
    """`allocation` with each stage of `gone` on a live standby that has the memory for it, the fastest
    first; None when `gone` hosts no stage, or some stage finds no standby with room (then allocate again)."""
    speed = {p.pnode: p for p in live if p.pnode not in gone}
    free = sorted((speed[s] for s in allocation.standbys if s in speed),
                  key=lambda p: (-p.flops_per_s, -p.bandwidth_bytes_per_s, p.rtt_s, p.pnode))
    taken: dict[str, str] = {}
    for stage in allocation.stages:
        if stage.pnode not in gone:
            continue
        room = next((p for p in free if p.memory_bytes >= stage.memory_bytes), None)
        if room is None:
            return None
        free.remove(room)
        taken[stage.pnode] = room.pnode
    if not taken:
        return None
    standing_by = {p.pnode for p in free}
    replicas = tuple(_moved(r, taken, standing_by) for r in allocation.replicas)
    return Takeover(replace(allocation, replicas=replicas), taken)


def _moved(pipeline: Allocation, taken: dict[str, str], standing_by: set[str]) -> Allocation:
    return replace(
        pipeline,
        assignment={v: taken.get(p, p) for v, p in pipeline.assignment.items()},
        stages=tuple(replace(s, pnode=taken.get(s.pnode, s.pnode)) for s in pipeline.stages),
        standbys=tuple(p for p in pipeline.standbys if p in standing_by),
    )
