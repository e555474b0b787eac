"""The allocator: a pure function (graph, PNodes with memory and measured speeds) -> allocation.

The network is laid out in topological order and cut into contiguous stages, one per PNode, so
graph neighbours stay together and a chain of blocks becomes a pipeline. VNodes that share a
weight (an embedding and its tied LM head) form one unit placed at the first member's position.
The score is the estimated step time (step_time.py): compute per stage at its PNode's speed, the
stage's traffic over its PNode's link, latency per hop. So on a slow link the cuts go where the
activations are smallest, and a slow PNode (or one behind a slow link) gets less work. A PNode
never holds more than the memory it advertises.

How many stages: `stages="auto"` takes the fewest whose estimate is within `WORTH` of the least
any count reaches, so a stage that would only add a bubble is not made (with one micro-batch
nothing overlaps and one stage is fastest, memory permitting); `stages=N` takes N (fewer when
there are fewer PNodes or units), for a session that wants its network spread. The PNodes left
without a stage are the allocation's standbys (`standby.py` has one take a lost PNode's stage).

For one order of the PNodes along the pipeline, dynamic programmes over the cut points find
1. the least possible bottleneck B* (the busiest stage's time per micro-batch), then
2. for caps B*, 1.04 B*, 1.04^2 B*, ...: the cut with the least total time of one micro-batch
   through every stage (the pipeline's fill and drain) among those whose busiest stage is within
   the cap; each is scored whole.
   The ladder stops when (M - 1) x cap + the least total of any cut cannot win.
The programmes run over band arrays (step_time.StageCosts), one array operation per stage.
Two orders are tried (most memory first, the embedding's stage being usually the largest; and
fastest first), and the better allocation kept.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from computeall.network import Graph
from computeall.protocol.config import OptimizerState, Stages

from .in_flight import decide_in_flight
from .step_time import PNodeCapacity, StageCosts, band_stage_time, stage_time, step_time_s

__all__ = ["Allocation", "AllocationError", "PNodeCapacity", "Stage", "allocate", "bytes_across"]

CAP_STEP = 1.04  # the bottleneck ladder's rung: stages within 4% of each other count as balanced
MAX_RUNGS = 60
# `stages: auto`: more stages must shorten the estimated step by more than this share to be worth
# their PNodes; within it, fewer stages do the same work with fewer bubbles and hops, and the
# choice does not flip with the noise of the PNodes' measurements
WORTH = 0.05
# `stages: auto` with many PNodes: every count up to this one, then a ladder of counts this much apart
EVERY_COUNT_UP_TO = 8
COUNT_STEP = 1.5


class AllocationError(ValueError):
    pass


@dataclass(frozen=True)
class Stage:
    pnode: str
    vnodes: tuple[str, ...]
    flops_per_step: float
    memory_bytes: int
    busy_s: float = 0.0  # estimated seconds busy per micro-batch once the pipeline is full (compute or link)


@dataclass(frozen=True)
class Allocation:
    assignment: dict[str, str]  # vnode -> pnode
    stages: tuple[Stage, ...]
    bytes_across_per_step: int
    step_time_s: float = 0.0  # the estimate the allocation minimised
    standbys: tuple[str, ...] = ()  # the PNodes offered that got no stage
    in_flight: int | None = None  # micro-batches each of its PNodes holds at once (1f1b, `in_flight.py`)


def allocate(graph: Graph, pnodes: list[PNodeCapacity], batch_size: int, micro_batch_size: int,
             stages: Stages = "auto", state: OptimizerState = "fp32") -> Allocation:
    if not pnodes:
        raise AllocationError("no PNodes are available; start one with `computeall pnode`")
    units = _units(graph)
    most = min(len(pnodes), len(units))
    counts = _stage_counts(most) if stages == "auto" else [min(stages, most)]
    costs = StageCosts(graph, units, batch_size, micro_batch_size, max_len=len(units) - counts[0] + 1, state=state)
    micro_batches = max(1, batch_size // micro_batch_size)
    bands = _bands(costs, pnodes, micro_batches)
    found: dict[int, tuple[float, list[int], list[PNodeCapacity]]] = {}  # stage count -> the best of that count
    for used in counts:
        best = _best_of(costs, pnodes, used, micro_batches, bands)
        if best is not None:
            found[used] = best
        if _past_the_least(found, used):
            break
    best = _fewest_worth_it(found)
    if best is None:
        need = costs.memory(0, len(units))
        have = ", ".join(f"{p.pnode}={p.memory_bytes / 2**20:.0f} MiB" for p in pnodes)
        raise AllocationError(
            f"the network needs about {need / 2**20:.0f} MiB and cannot be split to fit the PNodes ({have}); "
            "add PNodes or give them more memory"
        )
    estimate, cuts, order = best
    placed, assignment, start = [], {}, 0
    for speed, end in zip(order, cuts):
        members = tuple(v for u in units[start:end] for v in u)
        assignment.update({v: speed.pnode for v in members})
        placed.append(Stage(speed.pnode, members, costs.flops(start, end), costs.memory(start, end),
                            stage_time(costs, speed, start, end, micro_batches).busy_s))
        start = end
    standbys = tuple(p.pnode for p in order[len(cuts):])
    in_flight = decide_in_flight(graph, assignment, placed, {p.pnode: p for p in pnodes}, micro_batches, micro_batch_size)
    return Allocation(assignment, tuple(placed), bytes_across(graph, assignment, batch_size), estimate, standbys,
                      in_flight)


def _stage_counts(most: int) -> list[int]:
    """The stage counts `stages: auto` tries, fewest first: each up to EVERY_COUNT_UP_TO, then a ladder
    (a count's search costs about count x units x stage length; 256 PNodes cannot try them all)."""
    counts = list(range(1, min(most, EVERY_COUNT_UP_TO) + 1))
    while counts[-1] < most:
        counts.append(min(most, math.ceil(counts[-1] * COUNT_STEP)))
    return counts


def _best_of(costs: StageCosts, pnodes: list[PNodeCapacity], used: int, micro_batches: int,
             bands: dict[str, tuple[np.ndarray, np.ndarray]]) -> tuple[float, list[int], list[PNodeCapacity]] | None:
    """The least estimate with `used` stages, its cuts and the PNode order they are laid along."""
    best = None
    for order in _orders(pnodes, costs, used):
        found = _Search(costs, order[:used], micro_batches, bands).best()
        if found is not None and (best is None or found[0] < best[0]):
            best = (found[0], found[1], order)
    return best


def _past_the_least(found: dict[int, tuple], used: int) -> bool:
    """Whether counts beyond `used` need no try: the two last tried both missed the least so far by
    more than WORTH (more stages add bubbles and hops; the estimate only grows from there)."""
    tried = sorted(found)
    if len(tried) < 3 or tried[-1] != used:
        return False
    least = min(f[0] for f in found.values())
    return all(found[c][0] > least * (1 + WORTH) for c in tried[-2:])


def _fewest_worth_it(found: dict[int, tuple]) -> tuple | None:
    """The fewest stages whose estimate is within WORTH of the least."""
    if not found:
        return None
    least = min(f[0] for f in found.values())
    return found[min(c for c, f in found.items() if f[0] <= least * (1 + WORTH))]


class _Search:
    """The cut of the units over PNodes `order` (stage s on order[s], none empty) that minimises T."""

    def __init__(self, costs: StageCosts, order: list[PNodeCapacity], micro_batches: int,
                 bands: dict[str, tuple[np.ndarray, np.ndarray]]) -> None:
        self.costs, self.order, self.m = costs, order, micro_batches
        self.n, self.k = costs.n, len(order)
        longest = self.n - self.k + 1  # every other stage keeps a unit: the bands' columns beyond are of no use
        narrowed: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # PNodes alike share one pair of arrays
        for p in order:
            busy, through = bands[p.pnode]
            narrowed.setdefault(id(busy), (busy[:, :longest], through[:, :longest]))
        self.busy = [narrowed[id(bands[p.pnode][0])][0] for p in order]
        self.through = [narrowed[id(bands[p.pnode][0])][1] for p in order]
        self.last_end = [self.n - self.k + s + 1 for s in range(self.k)]  # every later stage keeps a unit
        # the stage [b - d - 1, b) reads the previous stages' best at its start: an index per band cell
        self.start = np.where(costs.valid, costs.start, 0)[:, :longest]
        # the least busy any stage of a given length can be: longer stages than a cap allows are cut off
        distinct = {id(b): b for b in self.busy}.values()
        self.shortest = np.min([busy.min(axis=0) for busy in distinct], axis=0)
        self.busy_values = np.sort(np.concatenate([busy[np.isfinite(busy)] for busy in distinct]))

    def best(self) -> tuple[float, list[int]] | None:
        least_total, cuts = self._least_total(math.inf)
        if cuts is None:
            return None  # the PNodes cannot hold the network in this order
        best = (self.score(cuts), cuts)
        if self.m == 1:  # no pipelining: the step is one micro-batch through every stage
            return best
        cap = self._least_bottleneck()
        admitted = self._admitted(math.inf)  # how many stages the last programme run could choose from
        for _ in range(MAX_RUNGS):
            if (self.m - 1) * cap + least_total >= best[0]:
                break  # any cut busier than this costs more in the (M - 1) term than it can save in the sum
            limit = cap * (1 + 1e-9)
            if self._admitted(limit) != admitted:  # else the same stages, the same cut: already scored
                admitted = self._admitted(limit)
                _, cuts = self._least_total(limit)
                if cuts is not None and (score := self.score(cuts)) < best[0]:
                    best = (score, cuts)
            cap *= CAP_STEP
        return best

    def _admitted(self, cap: float) -> int:
        """How many stages (over the distinct bands) are busy at most `cap`: a programme run under a cap
        depends on nothing else, so rungs that admit no new stage need no run of their own."""
        return int(np.searchsorted(self.busy_values, cap, side="right"))

    def score(self, cuts: list[int]) -> float:
        bounds = list(zip([0, *cuts[:-1]], cuts))
        stages = [stage_time(self.costs, p, a, b, self.m) for p, (a, b) in zip(self.order, bounds)]
        return step_time_s(stages, [p.rtt_s for p in self.order], self.m)

    def _least_bottleneck(self) -> float:
        g = np.full(self.n + 1, np.inf)
        g[0] = 0.0  # g[b]: the least bottleneck of the stages so far, the last ending at b
        for busy, last in zip(self.busy, self.last_end):
            g = np.maximum(g[self.start], busy).min(axis=1)
            g[last + 1:] = np.inf
        return float(g[self.n])

    def _least_total(self, cap: float) -> tuple[float, list[int] | None]:
        """The least sum of `through` times over cuts whose every stage is busy at most `cap`, and the cut."""
        width = int(np.nonzero(self.shortest <= cap)[0].max(initial=-1)) + 1  # longer stages cannot fit the cap
        if width == 0:
            return math.inf, None
        start = self.start[:, :width]
        h = np.full(self.n + 1, np.inf)
        h[0] = 0.0
        back = []
        rows = np.arange(self.n + 1)
        capped: dict[int, np.ndarray] = {}  # one per distinct band: PNodes alike share it
        for busy, through, last in zip(self.busy, self.through, self.last_end):
            if id(busy) not in capped:
                capped[id(busy)] = np.where(busy[:, :width] <= cap, through[:, :width], np.inf)
            total = h[start] + capped[id(busy)]
            d = total.argmin(axis=1)
            h = total[rows, d]
            h[last + 1:] = np.inf
            back.append(d)
        if not np.isfinite(h[self.n]):
            return math.inf, None
        cuts, b = [], self.n
        for d in reversed(back):
            cuts.append(b)
            b = b - int(d[b]) - 1
        return float(h[self.n]), cuts[::-1]


def _bands(costs: StageCosts, pnodes: list[PNodeCapacity],
           micro_batches: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Each PNode's (busy, through) bands (step_time.band_stage_time); PNodes alike (speed, link, memory) share them."""
    by_kind: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}
    out = {}
    for p in pnodes:
        kind = (p.flops_per_s, p.bandwidth_bytes_per_s, p.memory_bytes)
        if kind not in by_kind:
            by_kind[kind] = band_stage_time(costs, p, micro_batches)
        out[p.pnode] = by_kind[kind]
    return out


def _orders(pnodes: list[PNodeCapacity], costs: StageCosts, used: int) -> list[list[PNodeCapacity]]:
    """PNode orders along the pipeline worth trying: most memory first; fastest first."""
    by_memory = sorted(pnodes, key=lambda p: (-p.memory_bytes, p.pnode))
    typical_bytes = sum(costs.traffic(a, a + 1) for a in range(costs.n)) / costs.n
    share = costs.flops(0, costs.n) / used

    def stage_time(p: PNodeCapacity) -> float:
        return share / p.flops_per_s + typical_bytes / p.bandwidth_bytes_per_s

    by_speed = sorted(pnodes, key=lambda p: (stage_time(p), -p.memory_bytes, p.pnode))
    return [by_memory] if by_speed == by_memory else [by_memory, by_speed]


def bytes_across(graph: Graph, assignment: dict[str, str], batch_size: int) -> int:
    """Bytes crossing between PNodes per step (an output goes once to each other PNode), as recorded."""
    sent = {
        (e.src, assignment[e.dst]): graph.edge_bytes_per_step(e, batch_size)
        for e in graph.edges
        if e.src in assignment and assignment[e.src] != assignment[e.dst]
    }
    return sum(sent.values())


def _units(graph: Graph) -> list[tuple[str, ...]]:
    """VNodes in topological order, tied groups merged into their first member's place."""
    group_of: dict[str, frozenset[str]] = {}
    for group in graph.tie_groups():
        frozen = frozenset(group)
        group_of.update({v: frozen for v in group})
    units, placed = [], set()
    for vid in graph.order:
        if vid in placed:
            continue
        group = group_of.get(vid)
        members = tuple(v for v in graph.order if v in group) if group else (vid,)
        placed.update(members)
        units.append(members)
    return units
