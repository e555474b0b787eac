"""The pipeline schedules over simulated pipelines: they never deadlock, keep each VNode's items
in micro-batch order (what the math depends on), and 1F1B bounds the micro-batches in flight."""

import random
from pathlib import Path

import pytest

from computeall.network import Graph, load_network_file
from computeall.network.in_flight import default_in_flight
from computeall.orchestrator.allocator import PNodeCapacity, allocate
from computeall.pnode.schedule import SCHEDULES, WorkItem, pass_schedule

from .pipeline_sim import simulate

REPO = Path(__file__).resolve().parents[3]
GRAPH = Graph(load_network_file(REPO / "examples" / "networks" / "tiny-gpt.yaml"))


def allocated(pnodes: int) -> dict[str, str]:
    """The allocator's placement: contiguous stages, the embedding and the tied head on the first PNode."""
    return allocate(GRAPH, [PNodeCapacity(f"p{i}", 1 << 40) for i in range(pnodes)], 16, 1, stages=pnodes).assignment


def scattered(pnodes: int, seed: int) -> dict[str, str]:
    """Any placement at all: VNodes thrown on PNodes at random (a schedule must cope with every one)."""
    rng = random.Random(seed)
    return {v: f"p{rng.randrange(pnodes)}" for v in GRAPH.order}


PLACEMENTS = {
    "one PNode": {v: "p0" for v in GRAPH.order},
    **{f"allocated over {k}": allocated(k) for k in (2, 3, 4)},
    **{f"scattered over {k} (seed {s})": scattered(k, s) for k, s in ((2, 0), (3, 1), (5, 2))},
}


@pytest.mark.parametrize("placement", PLACEMENTS)
@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("micro_batches", [1, 3, 16])
def test_every_schedule_finishes_with_each_vnodes_items_in_micro_batch_order(placement, schedule, micro_batches):
    assignment = PLACEMENTS[placement]
    run = simulate(GRAPH, assignment, schedule, micro_batches, in_flight=2, latency=0.1)  # raises on a deadlock
    for pnode, items in run.order.items():
        local = [v for v in GRAPH.order if assignment[v] == pnode]
        assert len(items) == 2 * len(local) * micro_batches, "every forward and backward ran once"
        for vid in local:
            for kind in ("forward", "backward"):
                micros = [i.micro for i in items if i.vnode == vid and i.kind == kind]
                assert micros == list(range(micro_batches)), (vid, kind)
            first_backward = next(n for n, i in enumerate(items) if i.vnode == vid and i.kind == "backward")
            assert WorkItem("forward", 0, vid) in items[:first_backward]


@pytest.mark.parametrize("placement", PLACEMENTS)
@pytest.mark.parametrize("in_flight", [1, 2, 5])
def test_1f1b_never_holds_more_micro_batches_than_in_flight(placement, in_flight):
    run = simulate(GRAPH, PLACEMENTS[placement], "1f1b", 16, in_flight=in_flight, latency=0.3)
    assert max(run.most_in_flight.values()) <= in_flight
    held_per_micro = max(sum(1 for v in GRAPH.order if PLACEMENTS[placement][v] == p) for p in run.order)
    assert max(run.most_held.values()) <= in_flight * held_per_micro


def test_gpipe_runs_every_forward_before_a_backward():
    run = simulate(GRAPH, allocated(2), "gpipe", 4)
    for items in run.order.values():
        kinds = [i.kind for i in items]
        assert kinds == sorted(kinds, key=["forward", "backward"].index)


@pytest.mark.parametrize("pnodes", [2, 3])
def test_1f1b_with_the_default_bound_holds_far_less_than_gpipe_and_is_as_fast(pnodes):
    assignment = allocated(pnodes)
    bound = default_in_flight(GRAPH.order, assignment)
    assert bound == 2 * (pnodes + 1)  # the first PNode holds both ends: the pipeline has pnodes + 1 segments
    one_f_one_b = simulate(GRAPH, assignment, "1f1b", 16, in_flight=bound)
    gpipe = simulate(GRAPH, assignment, "gpipe", 16)
    assert max(one_f_one_b.most_held.values()) <= 0.4 * max(gpipe.most_held.values())
    assert one_f_one_b.makespan <= gpipe.makespan * 1.02


def test_a_forward_only_pass_has_no_backwards_and_no_bound():
    schedule = pass_schedule("1f1b", ["a", "b"], 3, backward=False, in_flight=1)
    order = []
    while not schedule.finished:
        item = schedule.next(lambda i: True)
        schedule.done(item)
        order.append(item)
    assert order == [WorkItem("forward", m, v) for m in range(3) for v in ("a", "b")]


def test_unknown_schedules_and_bounds_are_refused():
    with pytest.raises(ValueError, match="unknown schedule 'zigzag'; use one of 1f1b, gpipe"):
        pass_schedule("zigzag", ["a"], 1, True, 1)
    with pytest.raises(ValueError, match="in_flight must be at least 1"):
        pass_schedule("1f1b", ["a"], 1, True, 0)
