"""The allocator's cost model: how long a training step takes when the network is cut into stages.

Per micro-batch, the stage on PNode p computes (its FLOPs over p's FLOP/s, plus a fixed cost per
VNode: Python, an autograd call, bookkeeping, which dominates small networks) and moves its traffic
over p's link to the bus (the larger of what it sends and what it receives, over p's bandwidth).
A PNode's outbox sends while its compute thread goes on with the next work item, so once the
pipeline is full a stage is busy the longer of the two per micro-batch (`busy`); one micro-batch
going through it takes both, one after the other (`through`). With M micro-batches a step takes

    T = (M - 1) * max_s busy_s  +  sum_s through_s  +  2 * sum_s rtt_s      (the rtt term: > 1 stage)

one micro-batch all the way through (every stage once, and each PNode's link crossed both ways
forward and back), then one busiest stage more per further micro-batch. Figures a PNode has not
measured take NOMINAL values, the same for every PNode, so they cancel out of the comparison.

`StageCosts` precomputes, for the network's units (VNodes in topological order, tied groups
merged) and every contiguous range [a, b) of them, the FLOPs, memory and link traffic of a stage
holding exactly that range.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import accumulate

import numpy as np

from computeall.network import Graph
from computeall.network.memory_model import StepShape, stage_bytes, vnode_memory
from computeall.protocol.config import OptimizerState

# What a PNode that has not measured itself is taken to have: a CPU core's training throughput,
# a 1 Gbit/s LAN link with a 1 ms round trip.
NOMINAL_FLOPS_PER_S = 10e9
NOMINAL_BANDWIDTH_BYTES_PER_S = 125e6
NOMINAL_RTT_S = 1e-3
# a VNode's forward and backward of one micro-batch cost about this much beyond their FLOPs
# (micro-gpt with 8-token micro-batches on one core of the development machine: 0.5 to 1.4 ms)
VNODE_OVERHEAD_S = 1e-3


@dataclass(frozen=True)
class PNodeCapacity:
    """What the allocator is given of a PNode: its memory (a hard limit) and what it measured of its speed."""

    pnode: str
    memory_bytes: int
    flops_per_s: float = NOMINAL_FLOPS_PER_S
    bandwidth_bytes_per_s: float = NOMINAL_BANDWIDTH_BYTES_PER_S
    rtt_s: float = NOMINAL_RTT_S


def vnode_flops_per_token(graph: Graph, vid: str) -> float:
    """Forward+backward FLOPs per token, from the op's model in the registry."""
    return graph.flops_per_token(vid)


class StageCosts:
    """Per-step FLOPs, memory and link traffic of a stage holding units [a, b).

    Besides lookups by (a, b), the figures come as band arrays indexed [b, d] for the stage
    [b - d - 1, b), d < max_len (`valid` says which exist), so the allocator's dynamic programmes
    run over whole arrays at once.
    """

    def __init__(self, graph: Graph, units: list[tuple[str, ...]], batch_size: int, micro_batch_size: int,
                 max_len: int, state: OptimizerState = "fp32") -> None:
        tokens = batch_size * graph.spec.context
        self.n = n = len(units)
        self.max_len = max_len
        self._flops = [0.0, *accumulate(sum(vnode_flops_per_token(graph, v) for v in u) * tokens for u in units)]
        shape = StepShape(micro_batch_size, max(1, batch_size // micro_batch_size), state)
        self._parts = [[vnode_memory(graph, v, shape) for v in u] for u in units]
        self._vnodes = [0, *accumulate(len(u) for u in units)]
        self._traffic = traffic_grid(graph, units, batch_size)
        # band arrays: row b (0..n), column d: the stage [b - d - 1, b)
        b = np.arange(n + 1)[:, None]
        self.start = b - np.arange(max_len)[None, :] - 1
        self.valid = self.start >= 0
        start = np.where(self.valid, self.start, 0)
        flops, vnodes = np.array(self._flops), np.array(self._vnodes)
        self.band_flops = np.where(self.valid, flops[b] - flops[start], np.inf)
        self.band_vnodes = np.where(self.valid, vnodes[b] - vnodes[start], 0)
        self.band_memory = np.where(self.valid, self._band_memory(b, start), np.inf)
        self.band_traffic = np.where(self.valid, self._traffic[start, np.broadcast_to(b, start.shape)], 0.0)

    def flops(self, a: int, b: int) -> float:
        return self._flops[b] - self._flops[a]

    def _band_memory(self, b: np.ndarray, start: np.ndarray) -> np.ndarray:
        """`stage_bytes` of every band: prefix sums of what adds up, a running max of working memory."""
        def prefix(field: str) -> np.ndarray:
            return np.array([0, *accumulate(sum(getattr(p, field) for p in u) for u in self._parts)], dtype=np.float64)

        held, busy, update = (prefix(f)[b] - prefix(f)[start] for f in ("held", "busy", "update"))
        working = np.array([max((p.working for p in u), default=0) for u in self._parts] + [0], dtype=np.float64)
        band_working = np.zeros(start.shape)  # column d: the most of units [b - d - 1, b)
        for d in range(start.shape[1]):
            unit = working[np.clip(start[:, d], 0, None)]
            band_working[:, d] = np.maximum(band_working[:, d - 1] if d else 0, unit)
        return held + np.maximum(busy + band_working, update)

    def memory(self, a: int, b: int) -> int:
        return stage_bytes([p for u in self._parts[a:b] for p in u])

    def vnodes(self, a: int, b: int) -> int:
        return self._vnodes[b] - self._vnodes[a]

    def traffic(self, a: int, b: int) -> float:
        """Bytes per step over the link of the PNode holding [a, b): the larger of its two directions."""
        return float(self._traffic[a, b])


def traffic_grid(graph: Graph, units: list[tuple[str, ...]], batch_size: int) -> np.ndarray:
    """max(up, down) bytes per step of every stage [a, b) of the units, as a grid indexed [a, b].

    An output goes once to the PNode that reads it (however many of its VNodes do); a gradient
    comes back per consumer (docs/decisions.md). With x a VNode's output bytes:
        up   = sum over VNodes inside with a reader outside of x  +  x per edge from outside in (its gradient)
        down = sum over VNodes outside with a reader inside of x  +  x per edge from inside out (its gradient)
    The per-edge sums come from 2-D prefix sums of the edge matrix; each "has a reader across"
    term is a union of rectangles in (a, b), added into a 2-D difference array: no loop over stages.
    """
    n = len(units)
    position = {v: i for i, u in enumerate(units) for v in u}
    readers: dict[str, list[int]] = {}
    out_bytes: dict[str, int] = {}
    edge = np.zeros((n, n))  # [src unit, dst unit]: bytes one way, summed over edges
    for e in graph.edges:
        if e.src not in position or position[e.src] == position[e.dst]:
            continue  # from the dataset, or inside one unit
        one_way = graph.edge_bytes_per_step(e, batch_size) // 2
        readers.setdefault(e.src, []).append(position[e.dst])
        out_bytes[e.src] = one_way
        edge[position[e.src], position[e.dst]] += one_way

    sent_once, got_once = _Rectangles(n), _Rectangles(n)
    for src, positions in readers.items():
        p, x, cs = position[src], out_bytes[src], sorted(set(positions))
        # inside, with a reader outside: inside minus "it and all its readers inside"
        sent_once.add(0, p, p + 1, x)
        sent_once.add(0, min(p, cs[0]), max(p, cs[-1]) + 1, -x)
        # outside, with a reader inside: disjoint pieces {c_prev < a <= c, b > c}, minus where it is inside too
        lo = 0
        for c in cs:
            got_once.add(lo, c, c + 1, x)
            if lo <= min(c, p):
                got_once.add(lo, min(c, p), max(c, p) + 1, -x)
            lo = c + 1

    prefix = np.zeros((n + 1, n + 1))
    prefix[1:, 1:] = edge.cumsum(axis=0).cumsum(axis=1)
    rows, cols = prefix[:, n], prefix[n, :]  # bytes leaving units [0, i), entering units [0, j)
    a, b = np.arange(n + 1)[:, None], np.arange(n + 1)[None, :]
    inner = prefix[b, b] - prefix[a, b] - prefix[b, a] + prefix[a, a]
    up = sent_once.total() + (cols[b] - cols[a] - inner)
    down = got_once.total() + (rows[b] - rows[a] - inner)
    return np.where(b > a, np.maximum(up, down), 0.0)


class _Rectangles:
    """Sums of values over rectangles {a0 <= a <= a1, b >= b0} of the (a, b) grid, via a difference array."""

    def __init__(self, n: int) -> None:
        self.diff = np.zeros((n + 2, n + 2))

    def add(self, a0: int, a1: int, b0: int, value: float) -> None:
        self.diff[a0, b0] += value
        self.diff[a1 + 1, b0] -= value

    def total(self) -> np.ndarray:
        return self.diff.cumsum(axis=0).cumsum(axis=1)[:-1, :-1]


@dataclass(frozen=True)
class StageTime:
    """Seconds per micro-batch of one stage: `busy` once the pipeline is full (computing and sending
    overlap), `through` for one micro-batch on its own (computing, then sending)."""

    busy_s: float
    through_s: float


def stage_time(costs: StageCosts, speed: PNodeCapacity, a: int, b: int, micro_batches: int) -> StageTime:
    """The stage [a, b) on PNode `speed`."""
    compute = costs.flops(a, b) / speed.flops_per_s / micro_batches + costs.vnodes(a, b) * VNODE_OVERHEAD_S
    link = costs.traffic(a, b) / speed.bandwidth_bytes_per_s / micro_batches
    return StageTime(max(compute, link), compute + link)


def band_stage_time(costs: StageCosts, speed: PNodeCapacity, micro_batches: int) -> tuple[np.ndarray, np.ndarray]:
    """(busy, through) of every stage in the band arrays; inf where the stage does not exist or does not fit."""
    compute = costs.band_flops / speed.flops_per_s / micro_batches + costs.band_vnodes * VNODE_OVERHEAD_S
    link = costs.band_traffic / speed.bandwidth_bytes_per_s / micro_batches
    fits = costs.band_memory <= speed.memory_bytes
    return np.where(fits, np.maximum(compute, link), np.inf), np.where(fits, compute + link, np.inf)


def step_time_s(stages: list[StageTime], rtts: list[float], micro_batches: int) -> float:
    """The estimated step time of a pipeline of these stages."""
    latency = 2 * sum(rtts) if len(stages) > 1 else 0.0
    return (micro_batches - 1) * max(s.busy_s for s in stages) + sum(s.through_s for s in stages) + latency
