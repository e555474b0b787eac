"""The micro-batches in flight, decided at allocation from the measured round trips: the PNode's
default on fast links, more where a tensor's round trip outlasts a micro-batch's work, never more
than the step has micro-batches nor than the PNodes' memory holds."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from computeall.network import Graph, load_network_file
from computeall.network.in_flight import default_in_flight, segments
from computeall.network.memory_model import activation_bytes
from computeall.orchestrator.allocator import PNodeCapacity, allocate
from computeall.orchestrator.in_flight import decide_in_flight
from computeall.orchestrator.placement import Placement
from computeall.orchestrator.replication import ReplicatedAllocation
from computeall.protocol.config import PipelineConfig

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "networks"
GiB = 1 << 30
FAST_GPU = 1e12  # FLOP/s: a micro-batch of tiny-gpt takes ~17 ms a stage, less than a 50 ms link's round trip


@pytest.fixture(scope="module")
def tiny() -> Graph:
    return Graph(load_network_file(EXAMPLES / "tiny-gpt.yaml"))


def two(rtt_ms: float, memory: int = 4 * GiB) -> list[PNodeCapacity]:
    return [PNodeCapacity(p, memory, flops_per_s=FAST_GPU, rtt_s=rtt_ms / 1e3) for p in ("p0", "p1")]


def test_a_fast_link_gives_the_default(tiny) -> None:
    alloc = allocate(tiny, two(rtt_ms=1), batch_size=32, micro_batch_size=1, stages=2)
    assert alloc.in_flight == default_in_flight(tiny.order, alloc.assignment) == 6  # 3 segments: a visits p0 twice


def test_a_50ms_link_gives_enough_to_cover_its_round_trip(tiny) -> None:
    alloc = allocate(tiny, two(rtt_ms=50), batch_size=32, micro_batch_size=1, stages=2)
    busiest = max(s.busy_s for s in alloc.stages)
    assert busiest < 0.1  # the round trip (50 ms each way to the bus and back) outlasts a micro-batch's work
    assert alloc.in_flight == segments(tiny.order, alloc.assignment) + math.ceil(0.1 / busiest)
    assert alloc.in_flight > default_in_flight(tiny.order, alloc.assignment)


def test_a_step_of_few_micro_batches_caps_it(tiny) -> None:
    alloc = allocate(tiny, two(rtt_ms=50), batch_size=8, micro_batch_size=1, stages=2)
    assert alloc.in_flight == 8  # 9 would cover the round trip; the step has 8


def test_the_memory_left_for_activations_caps_what_exceeds_the_default(tiny) -> None:
    alloc = allocate(tiny, two(rtt_ms=50), batch_size=32, micro_batch_size=1, stages=2)
    pnodes = {p.pnode: p for p in two(rtt_ms=50)}
    per_micro = {s.pnode: tiny.spec.context * sum(activation_bytes(tiny, v) for v in s.vnodes) for s in alloc.stages}

    def with_room(micro_batches_more: int) -> dict[str, PNodeCapacity]:
        """p1 holds its stage's peak and the activations of this many micro-batches more."""
        stage = next(s for s in alloc.stages if s.pnode == "p1")
        return {**pnodes, "p1": replace(pnodes["p1"], memory_bytes=stage.memory_bytes + micro_batches_more * per_micro["p1"])}

    def decided(room: dict[str, PNodeCapacity]) -> int:
        return decide_in_flight(tiny, alloc.assignment, alloc.stages, room, micro_batches=32, micro_batch_size=1)

    assert decided(pnodes) == alloc.in_flight == 9
    assert decided(with_room(6)) == 7  # the one the memory model counts and six more
    assert decided(with_room(1)) == 6  # the default stands: the PNode's own rule, as without a decision


def test_one_stage_crosses_no_link(tiny) -> None:
    alloc = allocate(tiny, two(rtt_ms=50)[:1], batch_size=32, micro_batch_size=1)
    assert alloc.in_flight == default_in_flight(tiny.order, alloc.assignment) == 2


def test_the_plans_carry_the_decision_unless_the_session_fixed_it(tiny) -> None:
    allocation = ReplicatedAllocation((allocate(tiny, two(rtt_ms=50), batch_size=32, micro_batch_size=1, stages=2),))
    placement = Placement.__new__(Placement)  # only the session's config is read
    for fixed, carried in [(None, 9), (3, 3)]:
        placement.recorder = SimpleNamespace(state=SimpleNamespace(config=SimpleNamespace(
            pipeline=PipelineConfig(in_flight=fixed))))
        assert placement._pipeline(allocation, 0).in_flight == carried
