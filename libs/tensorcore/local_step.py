"""A step's micro-batches forward and backward through VNodeRuntimes in one process.

What a PNode stage does for a step, without the network in between: every VNode forward in
graph order, then every backward in reverse order, one micro-batch after the other, gradients
combined by the same rules as the stage (`loss_gradient`, `summed_in_order`,
`gradients_by_input`, the micro-batch tree of `MicroGradients`) and every edge carrying its
producer's wire format. So the parameters' gradients are the ones a session on any number of
PNodes and replicas accumulates. Benchmarks and tests train with it; the optimizer step stays the caller's.
`local_validation` is the forward alone, as a validation pass runs it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch

from computeall.network import Graph
from computeall.network.ops import DATA_INPUTS, OPS

from .vnode_runtime import VNodeRuntime, gradients_by_input, loss_gradient, summed_in_order
from .wire_formats import WireFormat, wire_format

# how one work item runs: fn(*args) by default; a benchmark hands it to a PNode-like compute thread
RunItem = Callable[..., Any]


def _call(fn: Callable, *args: Any) -> Any:
    return fn(*args)


@dataclass
class LocalStep:
    loss_sum: float = 0.0  # summed over every target token of the step
    tokens: int = 0  # target tokens of the step
    outputs: dict[str, torch.Tensor] = field(default_factory=dict)  # the last micro-batch's VNode outputs, when kept
    activation_bytes: int = 0  # the most held for backward at once (after a micro-batch's forward)
    calls: int = 0  # VNode forward and backward work items
    handoffs: int = 0  # tensors handed from VNode to VNode: activations forward, gradients back

    @property
    def loss(self) -> float:
        """The step's loss: the mean over its tokens."""
        return self.loss_sum / self.tokens


def local_step(
    runtimes: VNodeRuntime | Sequence[VNodeRuntime],
    micro_batches: Sequence[torch.Tensor],
    loss_scale: float = 1.0,
    run: RunItem = _call,
    block: range | None = None,
    keep_outputs: bool = False,
) -> LocalStep:
    """Forward and backward of one step; `micro_batches` are token ids (B, T+1) each. The runtimes
    together host the whole graph (one, or several standing for PNodes that split it). `block`: the
    micro-batches they run, when they stand for one replica of several (default: all).

    Memory follows the stage's: a VNode's output is let go once its consumers' backwards no longer
    need it, and the gradients handed back to it once its own backward has read them, unless
    `keep_outputs` keeps the last micro-batch's outputs for the caller."""
    runtimes = [runtimes] if isinstance(runtimes, VNodeRuntime) else list(runtimes)
    host = {v: r for r in runtimes for v in r.order}
    graph = runtimes[0].graph
    wires = {v: wire_format(graph.wire(v)) for v in graph.order}
    block = range(len(micro_batches)) if block is None else block
    result = LocalStep(tokens=sum(b[:, 1:].numel() for b in micro_batches))  # the step's: the loss's mean is over them
    for r in runtimes:
        r.start_step(block, len(micro_batches))
    for m in block:
        values = _forward(host, graph, wires, m, micro_batches[m], run, result)
        result.activation_bytes = max(result.activation_bytes, sum(r.activation_bytes() for r in runtimes))
        # backward, in reverse: each VNode once every consumer handed its gradient back
        grads: dict[str, dict[str, torch.Tensor]] = {v: {} for v in graph.order}
        for vid in reversed(graph.order):
            spec = graph.vnodes[vid]
            if OPS[spec.op].is_loss:
                grad_out = loss_gradient(loss_scale, result.tokens, host[vid].device)
            else:
                parts = grads.pop(vid)
                grad_out = summed_in_order([parts[c] for c in graph.consumers(vid)], host[vid].output_dtypes[vid])
                del parts
                if not keep_outputs:
                    values.pop(vid)  # its consumers' backwards are done
                if grad_out is None:  # an output nothing reads: nothing flows back
                    host[vid].drop_one(m, vid)
                    continue
            input_grads = run(host[vid].backward, vid, m, grad_out)
            result.calls += 1
            for name, g in gradients_by_input(spec.inputs, input_grads).items():
                grads[name][vid] = wires[name].encode(g).decode()  # back on the producer's edge
            result.handoffs += sum(1 for g in input_grads if g is not None)
        if keep_outputs:
            result.outputs = {k: v for k, v in values.items() if k not in DATA_INPUTS}
    for r in runtimes:
        r.finish_backward()
    return result


def local_validation(runtimes: VNodeRuntime | Sequence[VNodeRuntime], micro_batches: Sequence[torch.Tensor],
                     run: RunItem = _call) -> LocalStep:
    """Forward only, as a validation pass: the loss over every micro-batch, nothing kept for a backward."""
    runtimes = [runtimes] if isinstance(runtimes, VNodeRuntime) else list(runtimes)
    host = {v: r for r in runtimes for v in r.order}
    graph = runtimes[0].graph
    wires = {v: wire_format(graph.wire(v)) for v in graph.order}
    result = LocalStep(tokens=sum(b[:, 1:].numel() for b in micro_batches))
    for m, batch in enumerate(micro_batches):
        _forward(host, graph, wires, m, batch, run, result)
        for r in runtimes:
            r.drop(m)
    return result


def _forward(host: dict[str, VNodeRuntime], graph: Graph, wires: dict[str, WireFormat], m: int, batch: torch.Tensor,
             run: RunItem, result: LocalStep) -> dict[str, torch.Tensor]:
    """Micro-batch `m` forward, VNode by VNode: every VNode's output as its consumers read it (through
    its wire format); the loss goes into `result`."""
    values = {"data.tokens": batch[:, :-1], "data.targets": batch[:, 1:]}  # (B, T) each
    for vid in graph.order:
        inputs = graph.vnodes[vid].inputs
        out = run(host[vid].forward, vid, m, [values[i] for i in inputs])
        result.calls += 1
        result.handoffs += sum(1 for i in inputs if i not in DATA_INPUTS)
        if OPS[graph.vnodes[vid].op].is_loss:
            result.loss_sum += float(out)
        else:
            values[vid] = wires[vid].encode(out).decode()  # what its consumers read
    return values
