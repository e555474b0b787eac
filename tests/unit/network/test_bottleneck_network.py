"""tiny-gpt-wan: a bottleneck where two PNodes cut it, as the network YAML, the cost model and the allocator see it."""

from pathlib import Path

import pytest

from computeall.network import Graph, NetworkError, load_network, load_network_file
from computeall.network.graph import Edge
from computeall.orchestrator.allocator import PNodeCapacity, allocate, bytes_across

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "networks"
GiB = 1 << 30


@pytest.fixture(scope="module")
def wan() -> Graph:
    return Graph(load_network_file(EXAMPLES / "tiny-gpt-wan.yaml"))


def test_the_blocks_after_the_bottleneck_go_on_numbering(wan):
    blocks = sorted({v.split(".")[0] for v in wan.order if v[0] == "b" and v[1].isdigit()})
    assert blocks == ["b0", "b1", "b2", "b3"]
    assert wan.vnodes["b2.norm1"].inputs == ["cut.res"] and wan.vnodes["norm_f"].inputs == ["b3.res2"]
    assert wan.out_features["cut.down"] == 16 and wan.out_features["cut.up"] == 256


def test_the_cut_edge_is_at_least_32_times_smaller_than_the_residual_stream_both_ways(wan):
    plain = Graph(load_network_file(EXAMPLES / "tiny-gpt.yaml"))
    stream = plain.edge_bytes_per_step(Edge("b1.res2", "b2.norm1", 256), 8)  # fp32 activation and its gradient
    cut = wan.edge_bytes_per_step(Edge("cut.down", "cut.up", 16), 8)
    assert stream == 2 * 8 * 256 * 256 * 4
    assert cut == 2 * 8 * 256 * (16 + 4)  # int8 values and one fp32 scale per token, each way
    assert stream / cut >= 32


def test_on_a_slow_link_two_pnodes_cut_at_the_bottleneck_and_nothing_wide_crosses(wan):
    city = [PNodeCapacity(f"p{i}", 8 * GiB, flops_per_s=2e10, bandwidth_bytes_per_s=12.5e6, rtt_s=0.02) for i in range(2)]
    alloc = allocate(wan, city, batch_size=8, micro_batch_size=2)
    first, second = alloc.stages
    assert first.vnodes[-1] == "cut.down" and second.vnodes[0] == "cut.up"
    assert {"cut.tokens", "head"} <= set(second.vnodes), "the head sits with the embedding it is tied to"
    assert alloc.bytes_across_per_step == bytes_across(wan, alloc.assignment, 8) == 2 * 8 * 256 * (16 + 4)


@pytest.mark.parametrize("change, problem", [
    ("rank: 16 ", "vnode 'cut.down', field 'rank': rank 300 is wider than dim 256"),
    ("{id: cut.up, op: bottleneck_up, inputs: [cut.down]}", "vnode 'cut.up', field 'rank': expects 4 features but 'cut.down' gives 16"),
])
def test_a_bottleneck_that_does_not_fit_is_refused_naming_the_vnode_and_field(change, problem):
    text = (EXAMPLES / "tiny-gpt-wan.yaml").read_text()
    assert change in text
    text = text.replace(change, "rank: 300 " if change.startswith("rank") else change[:-1] + ", rank: 4}")
    with pytest.raises(NetworkError) as refused:
        load_network(text)
    assert problem in str(refused.value)
