"""A sharded LM head's tied gradient computed when its embedding's backward comes
(`VNodeRuntime.defer_tied_gradients`) is the gradient computed at the head's backward, bit for bit:
a lean PNode may defer while another does not, and the session's bits do not depend on it."""

from pathlib import Path

import pytest
import torch

from computeall.network import Graph, load_network
from computeall.network.vocab_split import split_vocab
from computeall.tensorcore.local_step import local_step
from computeall.tensorcore.ops.vocab_shards import LMHeadShard
from computeall.tensorcore.vnode_runtime import VNodeRuntime

MICRO = (Path(__file__).resolve().parents[3] / "examples" / "networks" / "llama-micro.yaml").read_text()
CPU = torch.device("cpu")


def _gradients(precision: str, defer: bool, calls: list[str]) -> dict[str, torch.Tensor]:
    graph = Graph(split_vocab(load_network(MICRO.replace("precision: fp32", f"precision: {precision}")))[0])
    runtime = VNodeRuntime(graph, graph.order, 7, CPU)
    if defer:
        runtime.defer_tied_gradients()
    for vid, module in runtime.modules.items():
        if isinstance(module, LMHeadShard):
            original = module.weight_grad
            module.weight_grad = lambda *args, _vid=vid, _f=original: calls.append(_vid) or _f(*args)
    tokens = torch.randint(0, graph.spec.vocab_size, (4, 2, graph.spec.context + 1), generator=torch.Generator().manual_seed(3))
    local_step(runtime, list(tokens))
    runtime.finish_backward()
    return {name: p.grad.clone() for name, p in runtime.parameters().items()}


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_deferred_tied_gradients_are_the_same_bits(precision):
    calls: list[str] = []
    eager = _gradients(precision, False, calls)
    assert calls == []
    deferred = _gradients(precision, True, calls)
    shards = sorted(set(calls))
    assert shards and len(calls) == 4 * len(shards), "each shard's weight gradient once a micro-batch"
    assert eager.keys() == deferred.keys()
    for name in eager:
        assert torch.equal(eager[name], deferred[name]), name
    assert any(name.startswith("embed.shard") for name in eager)
