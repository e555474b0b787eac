"""`local_step`: a step's micro-batches through VNodeRuntimes equal one autograd graph over the whole batch."""

import pytest
import torch

from computeall.tensorcore.local_step import local_step
from computeall.tensorcore.reference_model import ReferenceModel
from computeall.tensorcore.vnode_runtime import VNodeRuntime

from .helpers import batch, tiny_graph

CPU = torch.device("cpu")


def test_micro_batches_accumulate_to_the_gradient_of_the_whole_batch():
    graph = tiny_graph()
    micro = [batch(graph, n=2, seed=s) for s in range(3)]
    runtime = VNodeRuntime(graph, graph.order, 5, CPU)
    result = local_step(runtime, micro, loss_scale=4.0, keep_outputs=True)

    model = ReferenceModel(graph, 5)
    whole = torch.cat(micro)
    ref = model(whole[:, :-1], whole[:, 1:])
    (ref * 4.0 / whole[:, 1:].numel()).backward()

    assert result.tokens == whole[:, 1:].numel()
    assert result.loss_sum == pytest.approx(ref.item(), rel=1e-5)
    ref_params = model.named_vnode_parameters()
    for name, p in runtime.parameters().items():
        torch.testing.assert_close(p.grad, ref_params[name].grad, rtol=1e-4, atol=1e-6)
    assert result.calls == 2 * len(graph.order) * len(micro)  # every VNode forward and backward, per micro-batch
    assert result.activation_bytes > 0 and runtime.activation_bytes() == 0  # held for backward, then released
    assert set(result.outputs) == {v for v in graph.order if v != "head"}


def test_split_runtimes_give_the_bits_of_one():
    graph = tiny_graph()
    micro = [batch(graph, n=2, seed=s) for s in range(2)]
    middle = [v for v in graph.order if v.startswith("b1.")]
    one = VNodeRuntime(graph, graph.order, 3, CPU)
    two = [VNodeRuntime(graph, [v for v in graph.order if v not in middle], 3, CPU), VNodeRuntime(graph, middle, 3, CPU)]
    a, b = local_step(one, micro), local_step(two, micro)
    assert a.loss_sum == b.loss_sum and a.handoffs == b.handoffs
    grads = {n: p.grad for r in two for n, p in r.parameters().items()}
    for name, p in one.parameters().items():
        assert torch.equal(p.grad, grads[name]), name
