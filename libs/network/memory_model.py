"""What a PNode holds for the VNodes it hosts: the allocator's memory model, which the PNode also
reads to decide how it allocates (`computeall.pnode.lean_memory`).

A stage's peak is what it holds all along plus the larger of its two busy moments:
- held all along, per parameter: the weight in its VNode's precision, its gradient (from the first
  backward to the update), and the optimizer's state as the session keeps it (`STATE_BYTES`: fp32
  or 8-bit moments, a master for low precision);
- in forward and backward: each VNode's activations of a micro-batch (what the op keeps for its
  backward, or only its inputs when it recomputes), the partial sums of the micro-batch tree (one
  gradient more per level: `gradient_copies`), and the working memory of the VNode that needs most
  (`OpSpec.working_bytes`: temporaries, the head's logits chunks);
- in the update: what the state's update adds (the fp32 state's flat fp32 gradient copy; the 8-bit
  state updates a chunk at a time).
The process itself (torch) is taken off the offer (`hosting_bytes`). Checked against the peaks torch
allocates on small networks (tests/unit/network/test_memory_model.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from computeall.protocol.config import OptimizerState

from .graph import BYTES_PER_ELEMENT, Graph


@dataclass(frozen=True)
class StateBytes:
    """Bytes per parameter an optimizer state keeps besides the weight and its gradient."""

    master: Mapping[str, float]  # by the weight's precision: fp32 weights are their own master
    moments: float  # Adam's two, with their scales
    update: float  # held during the update only


STATE_BYTES: dict[OptimizerState, StateBytes] = {
    # fp32 moments, fp32 masters; the update gathers the gradients into a flat fp32 copy
    "fp32": StateBytes(master={"fp32": 0, "bf16": 4, "fp16": 4}, moments=8, update=4),
    # a byte per moment and an fp32 scale per 256 of them (kernels.blockwise_8bit.BLOCK); a bf16 master's low
    # half (fp16 keeps fp32)
    "int8": StateBytes(master={"fp32": 0, "bf16": 2, "fp16": 4}, moments=2 + 2 * 4 / 256, update=0),
    # the same moments, no master for a bf16 weight (rounded stochastically)
    "int8-sr": StateBytes(master={"fp32": 0, "bf16": 0, "fp16": 4}, moments=2 + 2 * 4 / 256, update=0),
}


@dataclass(frozen=True)
class StepShape:
    """What of a session's step shapes a stage's memory."""

    micro_batch_size: int
    micro_batches: int = 1  # that one replica sums (the tree's leaves)
    state: OptimizerState = "fp32"


def gradient_copies(micro_batches: int) -> int:
    """Gradients a parameter has at once while the micro-batch tree sums them: a partial sum per level
    of the tree, and the newest micro-batch's (`computeall.protocol.micro_tree`)."""
    return 1 + max(0, micro_batches - 1).bit_length()


def activation_bytes(graph: Graph, vid: str) -> int:
    """Bytes per token a VNode keeps for its backward: the op's model in the registry (in its precision,
    and what it keeps in fp32), or, when it recomputes, only its inputs (a token id counts as one
    element), if that is less, and none when its backward reads no input values."""
    op, params, site = graph.op(vid), graph.params(vid), graph.site(vid)
    element = BYTES_PER_ELEMENT[graph.vnodes[vid].precision]
    kept = op.activation_elements(params, site) * element + op.fp32_activation_elements(params, site, element < 4) * 4
    if graph.vnodes[vid].recompute:
        inputs = sum(graph.out_features[name] or 1 for name in graph.vnodes[vid].inputs) * element
        kept = min(kept, inputs if op.backward_reads_inputs else 0)
    return kept


@dataclass(frozen=True)
class VNodeMemory:
    """A VNode's part of its stage's peak, by when it is held (`stage_bytes` adds them up)."""

    held: int  # all along: weights, a gradient, the optimizer's state
    busy: int  # in forward and backward: activations, the tree's partial sums
    working: int  # for a moment in its forward or backward
    update: int  # during the update

    @property
    def alone(self) -> int:
        """The VNode on a stage of its own."""
        return stage_bytes([self])


def vnode_memory(graph: Graph, vid: str, shape: StepShape) -> VNodeMemory:
    v = graph.vnodes[vid]
    element = BYTES_PER_ELEMENT[v.precision]
    state = STATE_BYTES[shape.state]
    params = graph.param_count(vid)
    tokens = shape.micro_batch_size * graph.spec.context
    return VNodeMemory(
        held=int(params * (2 * element + state.master[v.precision] + state.moments)),
        busy=tokens * activation_bytes(graph, vid)
        + params * element * (gradient_copies(shape.micro_batches) - 1),
        working=graph.op(vid).working_bytes(graph.params(vid), graph.site(vid), tokens, element),
        update=int(params * state.update),
    )


def stage_bytes(parts: Sequence[VNodeMemory]) -> int:
    """A stage's peak: what it holds all along, plus the larger of forward-and-backward (every VNode's
    activations and partial sums, and the working memory of the VNode needing most) and the update."""
    busy = sum(p.busy for p in parts) + max((p.working for p in parts), default=0)
    return sum(p.held for p in parts) + max(busy, sum(p.update for p in parts))


def stage_memory_bytes(graph: Graph, vids: Sequence[str], shape: StepShape) -> int:
    return stage_bytes([vnode_memory(graph, v, shape) for v in vids])


def hosting_bytes(offered_bytes: int, process_bytes: int) -> int:
    """What a PNode's offer leaves for VNodes: the memory it offered less what its process held
    before hosting anything (`Heartbeat.process_bytes`). The allocator packs within it and the
    PNode judges a plan's tightness against it."""
    return max(0, offered_bytes - process_bytes)
