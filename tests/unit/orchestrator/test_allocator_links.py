"""The allocator on synthetic links: its score is the estimated step time, not bytes alone."""

from __future__ import annotations

from pathlib import Path

import pytest

from computeall.network import Graph, load_network, load_network_file
from computeall.orchestrator.allocator import WORTH, PNodeCapacity, allocate
from computeall.orchestrator.allocator import _units
from computeall.orchestrator.step_time import VNODE_OVERHEAD_S, StageCosts, stage_time, step_time_s, traffic_grid

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "networks"
GiB = 1 << 30
MBIT = 1e6 / 8  # bytes/s
TINY = (EXAMPLES / "tiny-gpt.yaml").read_text()
BLOCK = """  - repeat:
      count: {count}
      input: {input}
      output: "{name}{{i}}.res2"
      vnodes:
        - {{id: "{name}{{i}}.norm1", op: rmsnorm, inputs: ["{{in}}"]}}
        - {{id: "{name}{{i}}.attn", op: attention, inputs: ["{name}{{i}}.norm1"]}}
        - {{id: "{name}{{i}}.res1", op: add, inputs: ["{{in}}", "{name}{{i}}.attn"]}}
        - {{id: "{name}{{i}}.norm2", op: rmsnorm, inputs: ["{name}{{i}}.res1"]}}
        - {{id: "{name}{{i}}.mlp", op: swiglu_mlp, inputs: ["{name}{{i}}.norm2"]}}
        - {{id: "{name}{{i}}.res2", op: add, inputs: ["{name}{{i}}.res1", "{name}{{i}}.mlp"]}}
"""
# tiny-gpt whose first block hands its output on in bf16 (a norm in bf16 that the next blocks
# read): half the bytes of any other cut, but only a quarter of the way along the chain
NARROW = f"""name: narrow
vocab_size: 4096
context: 256
defaults: {{dim: 256, heads: 8, hidden: 688, precision: fp32}}
vnodes:
  - {{id: embed, op: embedding, inputs: [data.tokens]}}
{BLOCK.format(count=1, input="embed", name="a")}  - {{id: narrow, op: rmsnorm, inputs: [a0.res2], precision: bf16}}
{BLOCK.format(count=3, input="narrow", name="c")}  - {{id: norm_f, op: rmsnorm, inputs: [c2.res2]}}
  - {{id: head, op: tied_lm_head_ce, inputs: [norm_f, data.targets], tie: embed}}
"""


def pnode(name: str, mbit: float = 1000.0, flops: float = 10e9, rtt_ms: float = 1.0) -> PNodeCapacity:
    return PNodeCapacity(name, 4 * GiB, flops_per_s=flops, bandwidth_bytes_per_s=mbit * MBIT, rtt_s=rtt_ms / 1e3)


def stage_flops(alloc) -> dict[str, float]:
    return {s.pnode: s.flops_per_step for s in alloc.stages}


@pytest.fixture(scope="module")
def tiny() -> Graph:
    return Graph(load_network_file(EXAMPLES / "tiny-gpt.yaml"))


def test_a_slow_link_is_cut_where_the_activations_are_smallest() -> None:
    graph = Graph(load_network(NARROW))
    fast = allocate(graph, [pnode("p0"), pnode("p1")], batch_size=8, micro_batch_size=1, stages=2)
    slow = allocate(graph, [pnode("p0", mbit=10), pnode("p1", mbit=10)], batch_size=8, micro_batch_size=1, stages=2)
    # fast: balance wins, the cut is mid-chain; slow (sending takes longer than computing, so the
    # link is the bottleneck even though the two overlap): the bytes win, the cut is after the bf16 norm
    assert fast.stages[0].vnodes[-1] not in ("narrow", "a0.res2")
    assert slow.stages[0].vnodes[-1] == "narrow"
    assert slow.bytes_across_per_step < fast.bytes_across_per_step


def test_a_slow_pnode_gets_less_work(tiny) -> None:
    even = stage_flops(allocate(tiny, [pnode("p0"), pnode("p1")], 8, 1, stages=2))
    slow = stage_flops(allocate(tiny, [pnode("p0"), pnode("p1", flops=2.5e9)], 8, 1, stages=2))
    assert slow["p1"] < 0.5 * slow["p0"]
    assert slow["p1"] < even["p1"]


def test_a_pnode_behind_a_slow_link_gets_less_work(tiny) -> None:
    even = stage_flops(allocate(tiny, [pnode("p0"), pnode("p1"), pnode("p2")], 8, 1, stages=3))
    slow = stage_flops(allocate(tiny, [pnode("p0"), pnode("p1"), pnode("p2", mbit=20)], 8, 1, stages=3))
    assert slow["p2"] < even["p2"]
    assert slow["p2"] < min(slow["p0"], slow["p1"])


def test_extra_pnodes_behind_bad_links_are_left_out(tiny) -> None:
    units = len(tiny.vnodes) - 1  # the tied LM head shares the embedding's unit
    good = [pnode(f"good{i}") for i in range(units - 2)]
    bad = [pnode(f"bad{i}", mbit=5, rtt_ms=100) for i in range(5)]
    alloc = allocate(tiny, bad + good, 8, 1, stages=len(bad + good))
    used = {s.pnode for s in alloc.stages}
    assert len(alloc.stages) == units
    assert {p.pnode for p in good} <= used and len(used - {p.pnode for p in good}) == 2
    assert len(alloc.standbys) == 3 and set(alloc.standbys) <= {p.pnode for p in bad}


def test_stages_n_spreads_the_network_even_when_one_stage_would_be_faster(tiny) -> None:
    # one micro-batch: a pipeline cannot overlap anything, so the model would rather not split;
    # a session that asks for three stages (the tests of placement invariance do) gets them
    alloc = allocate(tiny, [pnode("p0"), pnode("p1"), pnode("p2")], 8, 8, stages=3)
    assert [bool(s.vnodes) for s in alloc.stages] == [True, True, True]
    assert alloc.standbys == ()


def test_a_stage_that_only_adds_a_bubble_is_not_made(tiny) -> None:
    # one micro-batch: every further stage adds its hops and nothing overlaps, so one PNode trains
    # and the others stand by
    alloc = allocate(tiny, [pnode("p0"), pnode("p1"), pnode("p2")], 8, 8)
    assert len(alloc.stages) == 1 and sorted(alloc.standbys) == ["p1", "p2"]
    assert alloc.step_time_s < allocate(tiny, [pnode("p0"), pnode("p1"), pnode("p2")], 8, 8, stages=3).step_time_s


def test_auto_takes_the_stages_that_shorten_the_step(tiny) -> None:
    # eight micro-batches overlap: each stage takes a share of the work, and the estimate picks the
    # fewest stages within WORTH of the least any count reaches
    pnodes = [pnode(f"p{i}") for i in range(6)]
    alloc = allocate(tiny, pnodes, 8, 1)
    by_count = {k: allocate(tiny, pnodes, 8, 1, stages=k).step_time_s for k in range(1, 7)}
    least = min(by_count.values())
    assert alloc.step_time_s == by_count[len(alloc.stages)]
    assert len(alloc.stages) == min(k for k, t in by_count.items() if t <= least * (1 + WORTH))
    assert len(alloc.stages) > 1  # pipelining pays here
    assert sorted([s.pnode for s in alloc.stages] + list(alloc.standbys)) == sorted(p.pnode for p in pnodes)


def test_auto_never_needs_more_memory_than_the_pnodes_have(tiny) -> None:
    need = allocate(tiny, [pnode("big")], 8, 8).stages[0].memory_bytes
    small = [PNodeCapacity(f"p{i}", int(need * 0.45)) for i in range(4)]
    alloc = allocate(tiny, small, 8, 8)  # one micro-batch would rather one stage; memory forces three
    assert len(alloc.stages) == 3 and all(s.memory_bytes <= int(need * 0.45) for s in alloc.stages)
    assert len(alloc.standbys) == 1


def test_the_estimate_is_the_documented_model(tiny) -> None:
    pnodes = [pnode("p0", rtt_ms=40), pnode("p1", mbit=100, rtt_ms=40)]
    alloc = allocate(tiny, pnodes, 8, 2, stages=2)
    units, bounds = _units(tiny), []
    for stage in alloc.stages:  # each stage as a range of units
        first = next(i for i, u in enumerate(units) if u[0] in stage.vnodes)
        bounds.append((first, first + sum(1 for u in units if u[0] in stage.vnodes)))
    costs = StageCosts(tiny, units, 8, 2, max_len=len(units))
    times = [stage_time(costs, p, a, b, 4) for p, (a, b) in zip(pnodes, bounds)]
    for t, (p, (a, b)) in zip(times, zip(pnodes, bounds)):
        compute = costs.flops(a, b) / p.flops_per_s / 4 + costs.vnodes(a, b) * VNODE_OVERHEAD_S
        link = costs.traffic(a, b) / p.bandwidth_bytes_per_s / 4
        # the outbox sends while the next item computes: busy is the longer, one micro-batch takes both
        assert (t.busy_s, t.through_s) == pytest.approx((max(compute, link), compute + link))
    assert [s.busy_s for s in alloc.stages] == pytest.approx([t.busy_s for t in times])
    assert alloc.step_time_s == pytest.approx(step_time_s(times, [0.04, 0.04], 4))
    assert alloc.step_time_s == pytest.approx(3 * max(t.busy_s for t in times) + sum(t.through_s for t in times) + 4 * 0.04)
    # more micro-batches, more overlap: the estimate per micro-batch shrinks
    finer = allocate(tiny, pnodes, 8, 1, stages=2)
    assert finer.step_time_s < alloc.step_time_s


def test_traffic_counts_an_output_once_and_each_gradient(tiny) -> None:
    units = _units(tiny)
    costs = StageCosts(tiny, units, 8, 8, max_len=len(units))
    one = 8 * tiny.spec.context * 256 * 4  # a residual-stream tensor per step, fp32
    after_b1 = next(i for i, u in enumerate(units) if u == ("b1.res2",)) + 1
    # [embed+head .. b1.res2]: sends b1.res2 once (two readers) and norm_f's gradient;
    # receives norm_f's output and the two gradients of b1.res2
    assert costs.traffic(0, after_b1) == 3 * one
    assert costs.traffic(0, len(units)) == 0  # everything in one stage: nothing moves


def brute_force_traffic(readers: dict[str, tuple[int, int, list[int]]], a: int, b: int) -> int:
    """The definition, stage by stage: an output once to the PNode that reads it, a gradient per consumer."""
    up = down = 0
    for x, src, dsts in readers.values():
        inside = a <= src < b
        across = [d for d in dsts if (a <= d < b) != inside]
        if across:
            up += x if inside else x * len(across)
            down += x * len(across) if inside else x
    return max(up, down)


def readers_of(graph: Graph, position: dict[str, int], batch_size: int) -> dict[str, tuple[int, int, list[int]]]:
    """Each VNode's output bytes, its unit, and its consumers' units (one per edge) outside its unit."""
    out: dict[str, tuple[int, int, list[int]]] = {}
    for e in graph.edges:
        if e.src in position and position[e.src] != position[e.dst]:
            x = graph.edge_bytes_per_step(e, batch_size) // 2
            out.setdefault(e.src, (x, position[e.src], []))[2].append(position[e.dst])
    return out


@pytest.mark.parametrize("name", ["micro-gpt.yaml", "tiny-gpt-heads.yaml"])
def test_the_traffic_grid_is_the_definition(name) -> None:
    graph = Graph(load_network_file(EXAMPLES / name))  # the per-head network: nine readers of each norm
    units = _units(graph)
    position = {v: i for i, u in enumerate(units) for v in u}
    grid, readers = traffic_grid(graph, units, 4), readers_of(graph, position, 4)
    for a in range(len(units)):
        for b in range(a + 1, len(units) + 1):
            assert grid[a, b] == brute_force_traffic(readers, a, b), (a, b)


def test_same_inputs_same_allocation_in_any_order(tiny) -> None:
    pnodes = [pnode("p0", mbit=100), pnode("p1", flops=5e9), pnode("p2", rtt_ms=30)]
    for stages in ("auto", 3):
        first = allocate(tiny, pnodes, 8, 1, stages=stages)
        assert allocate(tiny, pnodes[::-1], 8, 1, stages=stages) == first


def test_256_pnodes_and_256_vnodes(tiny) -> None:
    yaml = TINY.replace("count: 4", "count: 42").replace("b3.res2", "b41.res2")
    graph = Graph(load_network(yaml))
    pnodes = [pnode(f"p{i}", mbit=[20, 100, 1000][i % 3], flops=[5e9, 10e9][i % 2]) for i in range(256)]
    alloc = allocate(graph, pnodes, 64, 8, stages=len(pnodes))
    assert sorted(alloc.assignment) == sorted(graph.vnodes)
    assert len(alloc.stages) == len(graph.vnodes) - 1  # one unit each; a PNode is left over
