"""A standby takes a lost PNode's stage as it was; the other PNodes keep theirs."""

from dataclasses import replace
from pathlib import Path

import pytest

from computeall.network import Graph, load_network_file
from computeall.orchestrator.allocator import PNodeCapacity
from computeall.orchestrator.replication import allocate_replicas
from computeall.orchestrator.standby import take_over

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "networks"
GiB = 1 << 30


@pytest.fixture(scope="module")
def graph() -> Graph:
    return Graph(load_network_file(EXAMPLES / "tiny-gpt.yaml"))


def pnodes(*names: str, memory: int = 4 * GiB, flops: float = 10e9) -> list[PNodeCapacity]:
    return [PNodeCapacity(n, memory, flops_per_s=flops) for n in names]


def test_a_standby_takes_the_lost_stage_and_nothing_else_moves(graph):
    live = pnodes("p0", "p1", "p2", "p3")
    placed = allocate_replicas(graph, live, 1, 8, 1, stages=3)
    assert len(placed.pnodes) == 3 and len(placed.standbys) == 1
    lost = placed.pnodes[1]
    (standby,) = placed.standbys
    takeover = take_over(placed, {lost}, [p for p in live if p.pnode != lost])
    assert takeover.taken == {lost: standby}
    before, after = placed.assignments[0], takeover.allocation.assignments[0]
    assert {v: p for v, p in after.items() if before[v] != p} == {v: standby for v, p in before.items() if p == lost}
    assert [s.vnodes for s in takeover.allocation.stages] == [s.vnodes for s in placed.stages]
    assert takeover.allocation.standbys == [] and lost not in takeover.allocation.pnodes
    assert takeover.describe() == f"standby {standby} took {lost}'s stage"


def test_no_standby_with_room_means_allocating_again(graph):
    placed = allocate_replicas(graph, pnodes("p0", "p1", "p2"), 1, 8, 1, stages=2)
    (standby,) = placed.standbys
    lost = placed.pnodes[0]
    small = [p for p in pnodes("p0", "p1", "p2") if p.pnode not in (standby, lost)]
    small.append(PNodeCapacity(standby, placed.stages[0].memory_bytes - 1))
    assert take_over(placed, {lost}, small) is None
    # a standby that is not live any more is no standby
    assert take_over(placed, {lost}, [p for p in pnodes("p0", "p1", "p2") if p.pnode != standby]) is None


def test_losing_only_standbys_or_strangers_needs_no_takeover(graph):
    placed = allocate_replicas(graph, pnodes("p0", "p1", "p2"), 1, 8, 1, stages=2)
    assert take_over(placed, set(placed.standbys), pnodes("p0", "p1", "p2")) is None
    assert take_over(placed, {"elsewhere"}, pnodes("p0", "p1", "p2")) is None


def test_the_fastest_standby_takes_over_and_any_replica_may_use_it(graph):
    placed = allocate_replicas(graph, pnodes("p0", "p1", "p2", "p3"), 2, 8, 2, stages=2)
    # standbys listed by replica 0's group take stages of replica 1 as well
    placed = replace(placed, replicas=(replace(placed.replicas[0], standbys=("slow", "fast")), placed.replicas[1]))
    live = pnodes("p0", "p1", "p2", "p3") + pnodes("slow", flops=1e9) + pnodes("fast", flops=40e9)
    lost = placed.replicas[1].stages[0].pnode
    takeover = take_over(placed, {lost}, [p for p in live if p.pnode != lost])
    assert takeover.taken == {lost: "fast"}
    assert takeover.allocation.replicas[1].stages[0].pnode == "fast"
    assert takeover.allocation.assignments[0] == placed.assignments[0]  # the other replica is untouched
    assert takeover.allocation.standbys == ["slow"]
