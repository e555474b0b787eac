"""A discrete-event pipeline: PNodes with one compute thread each run a pass's work items in the
order their schedule picks, over a VNode graph and a placement, with a latency on every tensor
that crosses PNodes. It follows the stage's rules of readiness (a forward's inputs are here; a
backward's gradients from every consumer are here) and records what the schedules did."""

from __future__ import annotations

import heapq
from collections import defaultdict
from dataclasses import dataclass, field

from computeall.network import Graph
from computeall.network.ops import DATA_INPUTS, Site
from computeall.pnode.schedule import WorkItem, pass_schedule



@dataclass
class Run:
    makespan: float
    order: dict[str, list[WorkItem]]  # by PNode, as run
    most_in_flight: dict[str, int]  # micro-batches forward-started and not backward-finished, at worst
    most_held: dict[str, int]  # (micro, VNode) activations held for backward, at worst
    busy: dict[str, float] = field(default_factory=dict)


def costs(graph: Graph) -> dict[str, float]:
    """A forward's cost by VNode, from the op's FLOPs model, scaled so the whole forward costs 1
    (a backward costs twice its forward)."""
    flops = {v: graph.op(v).flops_per_token(graph.params(v), Site(graph.spec.context, graph.out_features[v] or 1))
             for v in graph.order}
    total = sum(flops.values())
    return {v: f / total for v, f in flops.items()}


def simulate(graph: Graph, assignment: dict[str, str], schedule: str, micro_batches: int,
             in_flight: int | None = None, latency: float = 0.05, backward: bool = True) -> Run:
    """`latency`: of a tensor between PNodes, in units of the whole network's forward time."""
    pnodes = sorted(set(assignment.values()))
    in_flight = in_flight or len(pnodes)
    local = {p: [v for v in graph.order if assignment[v] == p] for p in pnodes}
    schedules = {p: pass_schedule(schedule, local[p], micro_batches, backward, in_flight) for p in pnodes}
    consumers = {v: graph.consumers(v) for v in graph.order}
    cost = costs(graph)
    here: dict[str, set[tuple]] = {p: set() for p in pnodes}  # ("act", m, src) / ("grad", m, src, consumer)
    busy_until = {p: 0.0 for p in pnodes}
    run = Run(0.0, {p: [] for p in pnodes}, {p: 0 for p in pnodes}, {p: 0 for p in pnodes}, {p: 0.0 for p in pnodes})
    started: dict[str, set[int]] = {p: set() for p in pnodes}
    finished_backward: dict[str, defaultdict] = {p: defaultdict(int) for p in pnodes}
    held: dict[str, int] = {p: 0 for p in pnodes}
    events: list[tuple[float, int, str, tuple | None]] = []  # (time, seq, pnode, tensor arriving or None: idle)
    seq = 0

    def ready(p: str, item: WorkItem) -> bool:
        if item.kind == "forward":
            return all(i in DATA_INPUTS or ("act", item.micro, i) in here[p] for i in graph.vnodes[item.vnode].inputs)
        return all(("grad", item.micro, item.vnode, c) in here[p] for c in consumers[item.vnode])

    def deliver(at: float, p: str, key: tuple) -> None:
        nonlocal seq
        seq += 1
        heapq.heappush(events, (at, seq, p, key))

    for p in pnodes:
        deliver(0.0, p, None)
    while events:
        now, _, p, key = heapq.heappop(events)
        if key is not None:
            here[p].add(key)
        if busy_until[p] > now:
            continue  # it looks again when its item is done
        item = schedules[p].next(lambda i: ready(p, i))
        if item is None:
            continue
        vid, m = item.vnode, item.micro
        took = cost[vid] * (1 if item.kind == "forward" else 2)
        done_at = now + took
        busy_until[p] = done_at
        run.busy[p] += took
        schedules[p].done(item)
        run.order[p].append(item)
        if item.kind == "forward":
            started[p].add(m)
            held[p] += backward
            outputs = [(assignment[c], ("act", m, vid)) for c in consumers[vid]]
        else:
            held[p] -= 1
            finished_backward[p][m] += 1
            if finished_backward[p][m] == len(local[p]):
                started[p].discard(m)
            outputs = [(assignment[i], ("grad", m, i, vid)) for i in graph.vnodes[vid].inputs if i not in DATA_INPUTS]
        run.most_in_flight[p] = max(run.most_in_flight[p], len(started[p]) if backward else 0)
        run.most_held[p] = max(run.most_held[p], held[p])
        for dst, tensor in outputs:
            deliver(done_at + (0.0 if dst == p else latency), dst, tensor)
        deliver(done_at, p, None)
        run.makespan = max(run.makespan, done_at)
    stuck = {p: s.waiting_for() for p, s in schedules.items() if not s.finished}
    if stuck:
        raise AssertionError(f"deadlock: {stuck}")
    return run
