"""The allocator: a pure function (graph, PNodes with capacities) -> allocation.

The network is laid out in topological order and cut into contiguous stages, one per
PNode, so graph neighbours stay together and a chain of blocks becomes a pipeline.
VNodes that share a weight (an embedding and its tied LM head) form one unit placed
at the first member's position. A dynamic programme over the cut points minimises
the slowest stage's compute (balance), then the bytes crossing the network per step,
and never puts more on a PNode than the memory it advertises.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from computeall.network import Graph
from computeall.network.graph import BYTES_PER_ELEMENT

ADAM_STATE_BYTES = 8  # exp_avg and exp_avg_sq in fp32
MASTER_BYTES = 4  # fp32 master copy of a bf16/fp16 weight
GRAD_BUFFER_BYTES = 4  # the fused optimizer's flat fp32 gradient buffer


class AllocationError(ValueError):
    pass


@dataclass(frozen=True)
class PNodeCapacity:
    pnode: str
    memory_bytes: int


@dataclass(frozen=True)
class Stage:
    pnode: str
    vnodes: tuple[str, ...]
    flops_per_step: float
    memory_bytes: int


@dataclass(frozen=True)
class Allocation:
    assignment: dict[str, str]  # vnode -> pnode
    stages: tuple[Stage, ...]
    bytes_across_per_step: int


def vnode_flops_per_token(graph: Graph, vid: str) -> float:
    """Forward+backward FLOPs per token, from the op's model in the registry."""
    return graph.flops_per_token(vid)


def vnode_memory_bytes(graph: Graph, vid: str, micro_batch_size: int) -> int:
    """Weights, gradient, fp32 master (low precision only), Adam state, the optimizer's gradient buffer,
    and a micro-batch's activations (the op's model in the registry)."""
    v = graph.vnodes[vid]
    element = BYTES_PER_ELEMENT[v.precision]
    master = MASTER_BYTES if v.precision != "fp32" else 0
    params = graph.param_count(vid) * (2 * element + master + ADAM_STATE_BYTES + GRAD_BUFFER_BYTES)
    activations = graph.op(vid).activation_elements(graph.params(vid), graph.site(vid))
    return params + micro_batch_size * graph.spec.context * activations * element


def allocate(graph: Graph, pnodes: list[PNodeCapacity], batch_size: int, micro_batch_size: int) -> Allocation:
    if not pnodes:
        raise AllocationError("no PNodes are available; start one with `computeall pnode`")
    units = _units(graph)
    n, k = len(units), len(pnodes)
    tokens = batch_size * graph.spec.context
    unit_flops = [sum(vnode_flops_per_token(graph, v) for v in u) * tokens for u in units]
    unit_mem = [sum(vnode_memory_bytes(graph, v, micro_batch_size) for v in u) for u in units]
    position = {v: i for i, u in enumerate(units) for v in u}
    # PNodes with more memory take the earlier (embedding-holding, usually larger) stages
    order = sorted(pnodes, key=lambda p: (-p.memory_bytes, p.pnode))

    def out_bytes(a: int, b: int) -> int:
        """Bytes leaving the units [a, b) per step: each output with a consumer outside, sent once."""
        leaving = {
            e.src: graph.edge_bytes_per_step(e, batch_size)
            for e in graph.edges
            if e.src in position and a <= position[e.src] < b and not a <= position[e.dst] < b
        }
        return sum(leaving.values())

    INF = (float("inf"), float("inf"))
    # Stages within a few percent of each other count as equally balanced, so that the
    # byte score can pick block boundaries over cuts through a block.
    quantum = max(1.0, sum(unit_flops) / (25 * k))

    @lru_cache(maxsize=None)
    def best(start: int, stage: int) -> tuple[tuple[float, float], tuple[int, ...]]:
        """Best cut of units[start:] over PNodes order[stage:]; a stage may stay empty only at the end."""
        if start == n:
            return (0.0, 0.0), ()
        if stage == k:
            return INF, ()
        result, cuts = INF, ()
        mem = flops = 0
        for end in range(start + 1, n + 1):
            mem += unit_mem[end - 1]
            flops += unit_flops[end - 1]
            if mem > order[stage].memory_bytes:
                break
            rest, rest_cuts = best(end, stage + 1)
            score = (max(float(round(flops / quantum)), rest[0]), out_bytes(start, end) + rest[1])
            if score < result:
                result, cuts = score, (end,) + rest_cuts
        return result, cuts

    (_, across), cuts = best(0, 0)
    if not cuts:
        need = sum(unit_mem)
        have = ", ".join(f"{p.pnode}={p.memory_bytes / 2**20:.0f} MiB" for p in pnodes)
        raise AllocationError(
            f"the network needs about {need / 2**20:.0f} MiB and cannot be split to fit the PNodes ({have}); "
            "add PNodes or give them more memory"
        )
    stages, assignment, start = [], {}, 0
    for stage, end in enumerate(cuts):
        members = tuple(v for u in units[start:end] for v in u)
        pid = order[stage].pnode
        assignment.update({v: pid for v in members})
        stages.append(Stage(pid, members, sum(unit_flops[start:end]), sum(unit_mem[start:end])))
        start = end
    return Allocation(assignment, tuple(stages), int(across))


def bytes_across(graph: Graph, assignment: dict[str, str], batch_size: int) -> int:
    """The allocation's score: bytes crossing between PNodes per step (an output goes once to each other PNode)."""
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
        group = group_of.get(vid, frozenset({vid}))
        members = tuple(v for v in graph.order if v in group)
        placed.update(members)
        units.append(members)
    return units
