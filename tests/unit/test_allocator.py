"""The allocator: contiguous stages, tied weights together, capacity respected, bytes as the score."""

from pathlib import Path

import pytest

from computeall.network import Graph, load_network, load_network_file
from computeall.network.head_fusion import fuse_heads
from computeall.orchestrator.allocator import AllocationError, PNodeCapacity, allocate, bytes_across
from computeall.orchestrator.pnodes import capacity
from computeall.protocol.telemetry import Heartbeat

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "networks"
GiB = 1 << 30


@pytest.fixture
def graph() -> Graph:
    return Graph(load_network_file(EXAMPLES / "tiny-gpt.yaml"))


def pnodes(n: int, memory: int = 4 * GiB) -> list[PNodeCapacity]:
    return [PNodeCapacity(f"p{i}", memory) for i in range(n)]


@pytest.mark.parametrize("k", [1, 2, 3, 4])
def test_chain_is_cut_into_k_contiguous_stages(graph, k):
    alloc = allocate(graph, pnodes(k), batch_size=8, micro_batch_size=8, stages=k)
    assert len(alloc.stages) == k
    # every block VNode's stage index never goes back down along the topological order
    blocks = [v for v in graph.order if v.startswith("b") or v == "norm_f"]
    stage_of = {v: i for i, s in enumerate(alloc.stages) for v in s.vnodes}
    indices = [stage_of[v] for v in blocks]
    assert indices == sorted(indices)
    assert sorted(alloc.assignment) == sorted(graph.vnodes)


def test_tied_weights_share_a_pnode(graph):
    for k in (2, 3, 4):
        alloc = allocate(graph, pnodes(k), 8, 8, stages=k)
        assert alloc.assignment["embed"] == alloc.assignment["head"]


def test_capacity_is_respected_and_forces_more_stages(graph):
    one = allocate(graph, pnodes(1), 8, 8)
    need = one.stages[0].memory_bytes
    small = pnodes(3, memory=int(need * 0.45))
    alloc = allocate(graph, small, 8, 8)
    assert all(s.memory_bytes <= int(need * 0.45) for s in alloc.stages)
    with pytest.raises(AllocationError, match="cannot be split to fit"):
        allocate(graph, pnodes(2, memory=int(need * 0.3)), 8, 8)


def test_score_is_bytes_crossing_the_network(graph):
    assert allocate(graph, pnodes(1), 8, 8).bytes_across_per_step == 0
    alloc = allocate(graph, pnodes(2), 8, 8, stages=2)
    assert alloc.bytes_across_per_step == bytes_across(graph, alloc.assignment, 8) > 0
    # a residual-stream tensor: forward activation plus its gradient, fp32, every token
    one_tensor = 2 * 8 * graph.spec.context * 256 * 4
    assert alloc.bytes_across_per_step % one_tensor == 0
    # cutting at block boundaries: the stream crosses to the next stage and comes back to the head
    assert alloc.bytes_across_per_step == 2 * one_tensor


def test_no_pnodes_is_a_clear_error(graph):
    with pytest.raises(AllocationError, match="no PNodes"):
        allocate(graph, [], 8, 8)


def test_the_seed_network_fits_one_pnode_of_1_25_gib_only_with_recompute():
    """The offer less the PNode's own process (torch: about 250 MiB) is what training may use: the seed
    network as written peaks near 1.16 GiB on one PNode and is refused, with recompute about 0.77 GiB."""
    offered = Heartbeat(pnode="p", host="h", os_pid=1, device="cpu", memory_bytes=1280 << 20, ts=0.0,
                        process_bytes=250 << 20)
    text = (EXAMPLES / "seed-64heads.yaml").read_text()
    plain = Graph(fuse_heads(load_network(text))[0])
    recomputing = Graph(fuse_heads(load_network(text.replace("\ndefaults:\n", "\ndefaults:\n  recompute: true\n")))[0])
    pnode = capacity(offered, offered.memory_bytes)
    with pytest.raises(AllocationError, match="cannot be split to fit"):
        allocate(plain, [pnode], 8, 8)
    assert allocate(recomputing, [pnode], 8, 8).stages[0].memory_bytes < pnode.memory_bytes


def test_recompute_lets_a_network_fit_where_it_did_not():
    """The memory model knows a recomputing VNode keeps only its inputs: with a micro-batch whose
    activations dominate, tiny-gpt does not fit one PNode as written and fits with recompute."""
    text = (EXAMPLES / "tiny-gpt.yaml").read_text()
    assert "recompute" not in text
    plain = Graph(load_network(text))
    recomputing = Graph(load_network(text.replace("precision: fp32", "precision: fp32\n  recompute: true")))
    assert all(v.recompute for v in recomputing.vnodes.values())
    need = {name: allocate(g, pnodes(1, memory=64 * GiB), 64, 64).stages[0].memory_bytes
            for name, g in (("plain", plain), ("recompute", recomputing))}
    assert need["recompute"] < 0.5 * need["plain"]
    memory = (need["recompute"] + need["plain"]) // 2
    with pytest.raises(AllocationError):
        allocate(plain, pnodes(1, memory=memory), 64, 64)
    assert allocate(recomputing, pnodes(1, memory=memory), 64, 64).stages[0].memory_bytes == need["recompute"]
