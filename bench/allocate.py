"""How long the allocator takes, up to 256 PNodes x 256 VNodes, against its budget of 2 s.

The allocator is a pure function the orchestrator calls on every (re)allocation; the scale work
needs 256 PNodes x 256 VNodes placed within 2 s. The network is tiny-gpt repeated to the size
(6 VNodes a block), the PNodes differ in speed and link (a mix of 20, 100 and 1000 Mbit/s), and
the batch has 1 or 8 micro-batches (with more, the search tries more bottleneck caps). Each shape
is placed twice: on every PNode (`stages: K`) and with the stages that shorten the step (`auto`,
which searches several stage counts).

    python bench/allocate.py [--quick] [--json PATH]
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BUDGET_S = 2.0

from computeall.network import Graph, load_network  # noqa: E402
from computeall.orchestrator.allocator import PNodeCapacity, allocate  # noqa: E402


def network(blocks: int) -> Graph:
    text = (REPO / "examples" / "networks" / "tiny-gpt.yaml").read_text()
    return Graph(load_network(text.replace("count: 4", f"count: {blocks}").replace("b3.res2", f"b{blocks - 1}.res2")))


def pnodes(k: int) -> list[PNodeCapacity]:
    return [PNodeCapacity(f"p{i}", 4 << 30, flops_per_s=[20e9, 50e9][i % 2],
                          bandwidth_bytes_per_s=[20, 100, 1000][i % 3] * 1e6 / 8, rtt_s=[0.04, 0.01, 0.002][i % 3])
            for i in range(k)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one repeat, fewer shapes")
    parser.add_argument("--json", type=Path, default=REPO / "bench" / "results" / "allocate.json")
    args = parser.parse_args()
    repeats = 1 if args.quick else 3
    shapes = [(2, 4), (16, 42), (256, 42)] if args.quick else [(2, 4), (4, 4), (16, 42), (64, 42), (256, 42)]
    rows = []
    for k, blocks in shapes:
        graph = network(blocks)
        for micro_batches, asked in itertools.product((1, 8), (k, "auto")):
            times = []
            for _ in range(repeats):
                t0 = time.perf_counter()
                allocation = allocate(graph, pnodes(k), 8 * micro_batches, 8, stages=asked)
                times.append(time.perf_counter() - t0)
            median = statistics.median(times)
            rows.append({"pnodes": k, "vnodes": len(graph.vnodes), "micro_batches": micro_batches, "asked": asked,
                         "seconds": median, "ratio_vs_budget": median / BUDGET_S, "stages": len(allocation.stages),
                         "estimated_step_s": allocation.step_time_s})
            print(f"{k:>4} PNodes x {len(graph.vnodes):>4} VNodes, {micro_batches} micro-batches, stages {asked}: "
                  f"{median:7.3f} s  ({median / BUDGET_S:.3f} of the {BUDGET_S:g} s budget), {len(allocation.stages)} stages",
                  flush=True)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
