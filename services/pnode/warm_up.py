"""A PNode's first step, taken before it reports what its process holds (`Heartbeat.process_bytes`).

The first step any session takes pays, once per process and whatever the network, for what torch
sets up at first use (the pages of its kernels' code, the autograd engine, per-thread caches) and
for the modules a stage imports: about 55 MiB on this CPU, measured from a PNode's smaps. Counted
after the first session's step, it looked like memory of that session's VNodes: the allocator packed
within room the process had already taken, and bytes per parameter carried a fixed cost that does
not grow with the network. So a PNode takes one step of a micro network in each of the ways a
session computes (fp32 and bf16, kept activations and recomputed ones, each optimizer state)
before it measures itself; it lets everything of it go after.
"""

from __future__ import annotations

from typing import get_args

import torch

from computeall.network import Graph, load_network
from computeall.protocol.config import OptimizerConfig, OptimizerState
from computeall.tensorcore.local_step import local_step
from computeall.tensorcore.optimizer import VNodeOptimizer
from computeall.tensorcore.vnode_runtime import VNodeRuntime

MICRO_NETWORK = """
name: warm-up
vocab_size: 256
context: 16
defaults: {{dim: 32, heads: 2, hidden: 64, precision: {precision}, recompute: {recompute}}}
vnodes:
  - {{id: embed, op: embedding, inputs: [data.tokens]}}
  - {{id: norm, op: rmsnorm, inputs: [embed]}}
  - {{id: attn, op: attention, inputs: [norm]}}
  - {{id: res1, op: add, inputs: [embed, attn]}}
  - {{id: mlp, op: swiglu_mlp, inputs: [res1]}}
  - {{id: res2, op: add, inputs: [res1, mlp]}}
  - {{id: head, op: tied_lm_head_ce, inputs: [res2, data.targets], tie: embed}}
"""

WAYS = (("fp32", False), ("bf16", False), ("bf16", True))  # (precision, recompute)


def warm_up(device: torch.device) -> None:
    """Two steps of the micro network in each way, with each optimizer state."""
    generator = torch.Generator().manual_seed(0)
    for (precision, recompute), state in ((way, state) for way in WAYS for state in get_args(OptimizerState)):
        graph = Graph(load_network(MICRO_NETWORK.format(precision=precision, recompute=str(recompute).lower())))
        runtime = VNodeRuntime(graph, graph.order, 0, device)
        optimizer = VNodeOptimizer(runtime.parameters(), OptimizerConfig(state=state), runtime.decay_groups())
        for _ in range(2):
            tokens = torch.randint(0, graph.spec.vocab_size, (1, graph.spec.context + 1), generator=generator)
            local_step(runtime, [tokens.to(device)])
            runtime.grad_sq_norms()
            optimizer.step(1e-4)
            runtime.zero_grad()
