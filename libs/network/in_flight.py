"""How many micro-batches a PNode holds at once under the 1f1b schedule when nothing else decides it.

Read by the PNode (its fallback when a plan carries no `pipeline.in_flight`) and by the orchestrator,
which starts from it and adds what the measured round trips ask for (`computeall.orchestrator.in_flight`).
"""

from __future__ import annotations


def segments(order: list[str], assignment: dict[str, str]) -> int:
    """Runs of VNodes on one PNode along the topological order (2 PNodes holding embedding + first
    blocks, last blocks, LM head make 3 segments: a micro-batch visits the first PNode twice)."""
    return 1 + sum(1 for a, b in zip(order, order[1:]) if assignment[a] != assignment[b])


def default_in_flight(order: list[str], assignment: dict[str, str]) -> int:
    """Twice the segments of the pipeline. In simulation (tests/unit/pnode/pipeline_sim.py) once the
    segments cost a step 5-10% against an unbounded schedule, segments + 1 up to 17% with 3 PNodes;
    twice the segments cost nothing measurable and still hold a third to a quarter of the activations
    gpipe does with 16 micro-batches. Less in flight saves memory (about 40 MiB of peak RSS per
    micro-batch for tiny-gpt at 4 sequences a micro-batch): `--in-flight` trades it against speed."""
    return 2 * segments(order, assignment)
