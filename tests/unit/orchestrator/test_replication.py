"""Replicas on PNodes: one pipeline per group of PNodes, `auto` as many as fit, clear refusals."""

from pathlib import Path

import pytest

from computeall.network import Graph, load_network_file
from computeall.orchestrator.allocator import AllocationError, PNodeCapacity, allocate
from computeall.orchestrator.replication import allocate_replicas, sum_time_s

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "networks"
GiB = 1 << 30


@pytest.fixture
def graph() -> Graph:
    return Graph(load_network_file(EXAMPLES / "tiny-gpt.yaml"))


def pnodes(*memory: int) -> list[PNodeCapacity]:
    return [PNodeCapacity(f"p{i}", m) for i, m in enumerate(memory)]


def test_each_replica_gets_its_own_pnodes_and_the_whole_network(graph):
    placed = allocate_replicas(graph, pnodes(*[4 * GiB] * 4), 2, batch_size=8, micro_batches=4, stages=2)
    assert placed.count == 2 and sorted(placed.pnodes) == ["p0", "p1", "p2", "p3"]
    assert [sorted(set(a.values())) for a in placed.assignments] == [["p0", "p2"], ["p1", "p3"]]
    assert all(sorted(a) == sorted(graph.vnodes) for a in placed.assignments)
    assert [placed.replica_of(p) for p in ("p0", "p1", "p2", "p3")] == [0, 1, 0, 1]
    # each replica's pipeline is sized for its share of the batch
    alone = allocate(graph, pnodes(4 * GiB, 4 * GiB), 4, 2, stages=2)
    assert placed.replicas[0].bytes_across_per_step == alone.bytes_across_per_step


def test_auto_takes_as_many_replicas_as_fit_and_the_micro_batches_allow(graph):
    need = allocate(graph, pnodes(64 * GiB), 8, 2).stages[0].memory_bytes
    roomy = [need * 2] * 4
    assert allocate_replicas(graph, pnodes(*roomy), "auto", 8, micro_batches=4).count == 4
    assert allocate_replicas(graph, pnodes(*roomy), "auto", 8, micro_batches=2).count == 2
    assert allocate_replicas(graph, pnodes(*roomy[:3]), "auto", 8, micro_batches=4).count == 2
    # PNodes too small to hold the network alone: two of them make one replica
    small = [int(need * 0.6)] * 4
    assert allocate_replicas(graph, pnodes(*small), "auto", 8, micro_batches=4).count == 2
    assert allocate_replicas(graph, pnodes(*small[:3]), "auto", 8, micro_batches=4).count == 1


def test_a_fixed_count_the_pnodes_cannot_hold_is_refused_saying_why(graph):
    with pytest.raises(AllocationError, match="2 replicas need at least 2 PNodes"):
        allocate_replicas(graph, pnodes(4 * GiB), 2, 8, micro_batches=2)
    need = allocate(graph, pnodes(64 * GiB), 8, 2).stages[0].memory_bytes
    with pytest.raises(AllocationError, match="replica 1 of 2: .*cannot be split to fit"):
        allocate_replicas(graph, pnodes(2 * need, int(need * 0.5)), 2, 8, micro_batches=2)


FAST, SLOW = 125e6, 2e6  # bytes/s: a LAN, a home uplink


def measured(bandwidths: dict[str, float]) -> list[PNodeCapacity]:
    return [PNodeCapacity(name, 4 * GiB, flops_per_s=20e9, bandwidth_bytes_per_s=bw, rtt_s=1e-3 if bw == FAST else 30e-3)
            for name, bw in bandwidths.items()]


def test_replicas_of_a_vnode_are_summed_over_good_links_when_links_are_known(graph):
    # dealt by memory (all equal: by name), p0+p2 and p1+p3 would be the replicas: one all fast, one all
    # slow, and every VNode summed across a slow link
    links = {"p0": FAST, "p1": SLOW, "p2": FAST, "p3": SLOW}
    placed = allocate_replicas(graph, measured(links), 2, batch_size=8, micro_batches=4, stages=2)
    first, second = placed.assignments
    assert all(links[first[v]] == links[second[v]] for v in graph.order), "each VNode's replicas share a link class"
    assert [sorted(set(a.values())) for a in placed.assignments] == [["p0", "p1"], ["p2", "p3"]]
    by_memory = [[p for p in measured(links) if p.pnode in group] for group in (("p0", "p2"), ("p1", "p3"))]
    slow_sums = sum_time_s(graph, measured(links), [allocate(graph, g, 4, 2, stages=2).assignment for g in by_memory])
    assert placed.sum_s < slow_sums and placed.step_time_s > max(r.step_time_s for r in placed.replicas)


def test_pnodes_that_would_only_slow_a_replica_stand_by(graph):
    # the same PNodes with the stages left to the estimate: a stage behind a home uplink costs more
    # than it computes, so each replica runs on its LAN PNode and the others stand by
    links = {"p0": FAST, "p1": SLOW, "p2": FAST, "p3": SLOW}
    placed = allocate_replicas(graph, measured(links), 2, batch_size=8, micro_batches=4)
    assert [sorted(set(a.values())) for a in placed.assignments] == [["p0"], ["p2"]]
    assert placed.pnodes == ["p0", "p2"] and sorted(placed.standbys) == ["p1", "p3"]
    spread = allocate_replicas(graph, measured(links), 2, batch_size=8, micro_batches=4, stages=2)
    assert placed.step_time_s < spread.step_time_s and spread.standbys == []


def test_the_sum_estimate_is_each_gradient_over_the_slower_link_once_per_level(graph):
    gradient_bytes = sum(graph.param_count(v) * 4 for v in graph.order)  # tiny-gpt is fp32
    one_each = measured({"p0": FAST, "p1": FAST, "p2": FAST, "p3": SLOW})
    whole = {v: "p0" for v in graph.order}
    two = sum_time_s(graph, one_each, [whole, {v: "p1" for v in graph.order}])
    assert two == pytest.approx(gradient_bytes / FAST + 1e-3)
    four = sum_time_s(graph, one_each, [whole] + [{v: p for v in graph.order} for p in ("p1", "p2", "p3")])
    # the butterfly: p3 sums with p2 at level 0 and with p1 at level 1, both over its own slow link
    assert four == pytest.approx(2 * gradient_bytes / SLOW + 2 * 30e-3)
