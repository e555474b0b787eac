"""What a VNode costs in memory on the PNode that hosts it: the allocator's model, which the PNode
also reads to decide how it allocates (`computeall.pnode.lean_memory`).

Per parameter: the weight and its gradient in the VNode's precision, an fp32 master for low
precision, Adam's two fp32 moments, and the update's flat fp32 copy of the gradients. Per token of
a micro-batch: what the op keeps for its backward, or only its inputs when it recomputes.
Backward's working memory is not counted; the process itself (torch) is taken off the offer
(`hosting_bytes`).
"""

from __future__ import annotations

from .graph import BYTES_PER_ELEMENT, Graph

ADAM_STATE_BYTES = 8  # exp_avg and exp_avg_sq in fp32
MASTER_BYTES = 4  # fp32 master copy of a bf16/fp16 weight
GRAD_BUFFER_BYTES = 4  # the update's flat fp32 copy of the gradients (it lives for the update only)


def activation_elements(graph: Graph, vid: str) -> int:
    """Elements per token a VNode keeps for its backward: the op's model in the registry, or, when
    it recomputes, only its inputs (a token id counts as one element), if that is less, and none
    when its backward reads no input values."""
    op = graph.op(vid)
    kept = op.activation_elements(graph.params(vid), graph.site(vid))
    if graph.vnodes[vid].recompute:
        inputs = sum(graph.out_features[name] or 1 for name in graph.vnodes[vid].inputs)
        kept = min(kept, inputs if op.backward_reads_inputs else 0)
    return kept


def vnode_memory_bytes(graph: Graph, vid: str, micro_batch_size: int) -> int:
    """Weights, gradient, fp32 master (low precision only), Adam state, the update's gradient copy,
    and a micro-batch's activations (`activation_elements`)."""
    v = graph.vnodes[vid]
    element = BYTES_PER_ELEMENT[v.precision]
    master = MASTER_BYTES if v.precision != "fp32" else 0
    params = graph.param_count(vid) * (2 * element + master + ADAM_STATE_BYTES + GRAD_BUFFER_BYTES)
    return params + micro_batch_size * graph.spec.context * activation_elements(graph, vid) * element


def hosting_bytes(offered_bytes: int, process_bytes: int) -> int:
    """What a PNode's offer leaves for VNodes: the memory it offered less what its process held
    before hosting anything (`Heartbeat.process_bytes`). The allocator packs within it and the
    PNode judges a plan's tightness against it."""
    return max(0, offered_bytes - process_bytes)
