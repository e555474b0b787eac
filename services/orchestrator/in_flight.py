"""How many micro-batches each PNode of a pipeline holds at once (1f1b), decided at allocation.

A stage idles when the next micro-batch's activations (or a gradient) are still crossing a link. A
tensor sent from PNode a to PNode b crosses each one's link to the bus, and its gradient comes back
the same way: a cut costs about rtt_a + rtt_b before the answer to a micro-batch is back. While
it travels the busiest stage (`Stage.busy_s`, step_time.py) must have other micro-batches to work
on, so beyond one per segment the pipeline holds ceil(that round trip / busy_s) more:

    in_flight = max(default, segments + ceil(max over cuts of (rtt_a + rtt_b) / max busy_s))

`default` is the PNode's own rule (twice the segments, `computeall.network.in_flight`), kept where
the links are fast. More than the step's micro-batches changes nothing, so it is capped there; and
what exceeds the default is capped by the memory each PNode has left for activations after the
memory model's peak (which counts one micro-batch's). Only the order of work changes, never the bits.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Sequence

from computeall.network import Graph
from computeall.network.in_flight import default_in_flight, segments
from computeall.network.memory_model import activation_bytes

from .step_time import PNodeCapacity

if TYPE_CHECKING:
    from .allocator import Stage


def decide_in_flight(graph: Graph, assignment: dict[str, str], stages: Sequence[Stage],
                     pnodes: dict[str, PNodeCapacity], micro_batches: int, micro_batch_size: int) -> int:
    """Micro-batches each PNode of this pipeline may hold at once."""
    default = default_in_flight(graph.order, assignment)
    floor = min(default, micro_batches)
    busiest = max((s.busy_s for s in stages), default=0.0)
    round_trip = max((pnodes[assignment[e.src]].rtt_s + pnodes[assignment[e.dst]].rtt_s
                      for e in graph.edges if e.src in assignment and assignment[e.src] != assignment[e.dst]),
                     default=0.0)
    if busiest <= 0 or round_trip <= 0:
        return floor
    wanted = segments(graph.order, assignment) + math.ceil(round_trip / busiest)
    rooms = [_activations_room(graph, s, pnodes[s.pnode], micro_batch_size) for s in stages]
    return max(floor, min(wanted, micro_batches, *rooms))


def _activations_room(graph: Graph, stage: Stage, pnode: PNodeCapacity, micro_batch_size: int) -> int:
    """Micro-batches whose activations fit the PNode: the one the memory model counts, and as many
    more as the memory left over holds."""
    per_micro = max(1, micro_batch_size * graph.spec.context * sum(activation_bytes(graph, v) for v in stage.vnodes))
    return 1 + max(0, pnode.memory_bytes - stage.memory_bytes) // per_micro
