"""What a simulated PNode models instead of computing: time per FLOP, bytes per tensor, a loss.

- Time: a VNode's forward and backward of one micro-batch take its FLOPs (the op registry's cost
  model, the allocator's units: forward + backward per token) over the PNode's advertised FLOP/s,
  one third forward and two thirds backward. That FLOP/s and a 1 Gbit/s, 1 ms link are what it
  reports as its `Throughput`.
- Bytes: a VNode's output for one micro-batch is micro_batch_size x context x its width in its
  precision; its gradient is as large. What goes on the wire is a placeholder that names that count.
- Loss: a function of (seed, phase, step) alone, so every placement, restart and replay of a
  simulated session records the same losses, as a real one must.
- Weights: each VNode's "parameters" are a digest chained over the steps it applied, so a
  checkpoint carries state that a wrong restore would visibly change.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

from computeall.network import Graph
from computeall.network.graph import BYTES_PER_ELEMENT, init_seed
from computeall.network.memory_model import STATE_BYTES
from computeall.protocol.pnode_api import LoadPlan

# what a simulated PNode reports of its link (it measures nothing): a 1 Gbit/s LAN, 1 ms away
BANDWIDTH_BYTES_PER_S = 125e6
RTT_S = 1e-3
FORWARD_SHARE = 1 / 3  # of a VNode's forward+backward FLOPs (backward is about twice the forward)


@dataclass(frozen=True)
class VNodeCost:
    forward_s: float  # one micro-batch
    backward_s: float
    output_bytes: int  # one micro-batch's output (0: a loss, which outputs a number)
    params: int
    element_bytes: int


def vnode_costs(graph: Graph, plan: LoadPlan, vnodes: list[str], flops_per_s: float) -> dict[str, VNodeCost]:
    tokens = plan.batches.micro_batch_size * plan.batches.context
    costs = {}
    for vid in vnodes:
        seconds = graph.flops_per_token(vid) * tokens / flops_per_s
        element = BYTES_PER_ELEMENT[graph.vnodes[vid].precision]
        width = graph.out_features[vid]
        out = 0 if graph.op(vid).is_loss or width is None else tokens * width * element
        costs[vid] = VNodeCost(seconds * FORWARD_SHARE, seconds * (1 - FORWARD_SHARE), out, graph.param_count(vid), element)
    return costs


def memory_by_category(costs: dict[str, VNodeCost]) -> dict[str, int]:
    """What the VNodes would hold on a real PNode (fp32 Adam moments; no master copies modelled)."""
    weights = sum(c.params * c.element_bytes for c in costs.values())
    return {
        "weights": weights,
        "optimizer": sum(c.params * STATE_BYTES["fp32"].moments for c in costs.values()),
        "gradients": weights,
        "params": sum(c.params for c in costs.values()),
    }


def loss_per_token(seed: int, phase: str, step: int, vocab_size: int) -> float:
    """A falling curve from ln(vocab) with a little deterministic noise."""
    noise = int.from_bytes(hashlib.blake2b(f"{seed}:{phase}:{step}".encode(), digest_size=8).digest(), "little") / 2**64
    return math.log(vocab_size) * (0.4 + 0.6 * math.exp(-step / 200)) + 0.02 * (noise - 0.5)


def initial_state(seed: int, vid: str) -> str:
    return hashlib.blake2b(f"init:{init_seed(seed, vid)}".encode(), digest_size=16).hexdigest()


def applied(state: str, step: int, lr: float) -> str:
    """The state after the optimizer step `step` at learning rate `lr`."""
    return hashlib.blake2b(f"{state}:{step}:{lr!r}".encode(), digest_size=16).hexdigest()
