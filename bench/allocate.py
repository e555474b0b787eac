"""How long the allocator takes, up to 256 PNodes x 256 VNodes, against one step of the network it places.

    python -m bench.allocate [--quick] [--json PATH]

The allocator is a pure function the orchestrator calls on every (re)allocation: a session waits for
it as it would wait for steps. So its time is divided by one step of tiny-gpt (forward and backward
of one micro-batch of 8 x 256 tokens, every VNode in this process, every core), measured here: this
machine's speed in training work, and the smallest step a session of ours takes. Placing even 256
VNodes over 256 PNodes must cost less than that one step. The network is tiny-gpt repeated to the
size (6 VNodes a block), the PNodes differ in speed and link (a mix of 20, 100 and 1000 Mbit/s), and
the batch has 1 or 8 micro-batches (with more, the search tries more bottleneck caps). Each shape
is placed twice: on every PNode (`stages: K`) and with the stages that shorten the step (`auto`,
which searches several stage counts).
"""

from __future__ import annotations

import itertools
import statistics
import sys
import time
from functools import cache

import torch

from computeall.network import Graph, load_network
from computeall.orchestrator.allocator import PNodeCapacity, allocate
from computeall.tensorcore.local_step import local_step
from computeall.tensorcore.vnode_runtime import VNodeRuntime

from .common import REPO, Bench, at_most

MICRO_BATCH = 8


def network(blocks: int) -> Graph:
    text = (REPO / "examples" / "networks" / "tiny-gpt.yaml").read_text()
    return Graph(load_network(text.replace("count: 4", f"count: {blocks}").replace("b3.res2", f"b{blocks - 1}.res2")))


def pnodes(k: int) -> list[PNodeCapacity]:
    return [PNodeCapacity(f"p{i}", 4 << 30, flops_per_s=[20e9, 50e9][i % 2],
                          bandwidth_bytes_per_s=[20, 100, 1000][i % 3] * 1e6 / 8, rtt_s=[0.04, 0.01, 0.002][i % 3])
            for i in range(k)]


@cache
def step_s() -> float:
    """One micro-batch's forward and backward of tiny-gpt, all of it in this process, after a warm-up
    on one sequence."""
    graph = network(4)
    runtime = VNodeRuntime(graph, graph.order, 0, torch.device("cpu"))
    for rows in (1, MICRO_BATCH):
        t0 = time.perf_counter()
        local_step(runtime, [torch.randint(0, graph.spec.vocab_size, (rows, graph.spec.context + 1))])
        runtime.zero_grad()
    return time.perf_counter() - t0


def main() -> int:
    bench = Bench("allocate", __doc__, quick_help="one repeat, fewer shapes")
    args = bench.parse()
    repeats = 1 if args.quick else 3
    shapes = [(2, 4), (16, 42), (256, 42)] if args.quick else [(2, 4), (4, 4), (16, 42), (64, 42), (256, 42)]
    for k, blocks in shapes:
        graph = network(blocks)
        for micro_batches, stages in itertools.product((1, 8), (k, "auto")):
            times = []
            for _ in range(repeats):
                t0 = time.perf_counter()
                allocate(graph, pnodes(k), MICRO_BATCH * micro_batches, MICRO_BATCH, stages=stages)
                times.append(time.perf_counter() - t0)
            bench.row(f"allocate {k} PNodes x {len(graph.vnodes)} VNodes, {micro_batches} micro-batch(es), stages {stages}", "s",
                      statistics.median(times), "one step of tiny-gpt (8 x 256 tokens)", step_s(),
                      at_most(1.0))
    return bench.finish()


if __name__ == "__main__":
    sys.exit(main())
