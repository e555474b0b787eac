"""Allocations pinned stage by stage: the allocator's speed-ups must not change what it places where.

Each digest covers every stage (its PNode and VNodes, in pipeline order) and the estimated step
time, exactly; they were recorded from the allocator before its rungs were skipped (#16). A change
that is meant to move VNodes records new digests and says why.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from computeall.cli.swarm import micro_gpt
from computeall.network import Graph, load_network
from computeall.orchestrator.allocator import Allocation, PNodeCapacity, allocate

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "networks"
GiB = 1 << 30


def tiny_gpt(blocks: int) -> str:
    text = (EXAMPLES / "tiny-gpt.yaml").read_text()
    return text.replace("count: 4", f"count: {blocks}").replace("b3.res2", f"b{blocks - 1}.res2")


def simulated(k: int) -> list[PNodeCapacity]:
    """PNodes alike, as `computeall pnode --simulate` advertises them (bench/swarm.py)."""
    return [PNodeCapacity(f"sim-{i:03d}", GiB, flops_per_s=1e12) for i in range(k)]


def mixed(k: int) -> list[PNodeCapacity]:
    """Two speeds and three links (20, 100, 1000 Mbit/s), as bench/allocate.py has them."""
    return [PNodeCapacity(f"p{i}", 4 * GiB, flops_per_s=[5e9, 10e9][i % 2],
                          bandwidth_bytes_per_s=[20, 100, 1000][i % 3] * 1e6 / 8, rtt_s=[0.04, 0.01, 0.002][i % 3])
            for i in range(k)]


def digest(alloc: Allocation) -> str:
    stages = [(s.pnode, s.vnodes) for s in alloc.stages]
    return hashlib.sha256(f"{stages!r} {alloc.step_time_s!r}".encode()).hexdigest()[:16]


NETWORKS = {"micro": micro_gpt, "tiny": tiny_gpt}
PNODES = {"simulated": simulated, "mixed": mixed}

# (network, blocks, PNodes, how many, batch size, micro-batch size) -> digest
PINNED = {
    ("micro", 42, "simulated", 256, 8, 2): "d8f6019a49a30fcc",  # bench/swarm.py at 256: one unit per PNode
    ("micro", 42, "simulated", 248, 8, 2): "e56e1311b02e4f75",  # after a kill of 8
    ("micro", 42, "simulated", 200, 8, 2): "c41c15bb149b1c6b",
    ("micro", 20, "simulated", 128, 8, 2): "6b7b48f8f2110524",
    ("tiny", 4, "mixed", 3, 8, 1): "f14760f6e986f483",
    ("tiny", 16, "mixed", 16, 64, 8): "c666946abf492374",
    ("tiny", 16, "mixed", 40, 32, 8): "455ed9cfd2a83fbc",
    ("tiny", 42, "mixed", 256, 64, 8): "f2291059eb03c739",
}


@pytest.mark.parametrize("case", list(PINNED), ids=lambda c: "-".join(map(str, c)))
def test_allocation_is_pinned(case) -> None:
    network, blocks, kind, k, batch_size, micro_batch_size = case
    graph = Graph(load_network(NETWORKS[network](blocks)))
    assert digest(allocate(graph, PNODES[kind](k), batch_size, micro_batch_size, stages=k)) == PINNED[case]
