"""fp32 / bf16 / fp16 through the VNode runtime: construction, casts at VNode boundaries, wire bytes."""

import pytest
import torch

from computeall.network.ops import OPS
from computeall.tensorcore.local_step import local_step
from computeall.tensorcore.precision import DTYPES
from computeall.tensorcore.reference_model import ReferenceModel
from computeall.tensorcore.vnode_runtime import VNodeRuntime
from computeall.tensorcore.tensor_frames import tensor_frames, tensor_from_wire
from computeall.protocol import wire

from .helpers import batch, tiny_graph

CPU = torch.device("cpu")


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_parameters_are_built_in_the_vnode_precision_from_the_same_fp32_init(precision):
    fp32 = VNodeRuntime(tiny_graph("fp32"), tiny_graph("fp32").order, 3, CPU).parameters()
    low = VNodeRuntime(tiny_graph(precision), tiny_graph(precision).order, 3, CPU).parameters()
    assert fp32.keys() == low.keys()
    for name, p in low.items():
        assert p.dtype == DTYPES[precision], name
        assert torch.equal(p, fp32[name].to(p.dtype)), name  # the fp32 init, cast


def test_each_vnode_computes_and_outputs_in_its_own_precision_and_hands_back_gradients_in_the_producers():
    graph = tiny_graph("bf16", embed="fp32", attn="fp16", head="fp32")
    runtime = VNodeRuntime(graph, graph.order, 0, CPU)
    assert runtime.parameters()["embed.weight"].dtype == torch.float32
    assert runtime.parameters()["b0.attn.qkv.weight"].dtype == torch.float16
    assert runtime.parameters()["b0.mlp.gate_up.weight"].dtype == torch.bfloat16
    tokens = batch(graph)
    runtime.start_step(range(1), 1)
    values = {"data.tokens": tokens[:, :-1], "data.targets": tokens[:, 1:]}
    for vid in runtime.order:
        spec = graph.vnodes[vid]
        out = runtime.forward(vid, 0, [values[i] for i in spec.inputs])
        if OPS[spec.op].is_loss:
            assert out.dtype == torch.float32 and out.ndim == 0 and torch.isfinite(out)
            continue
        assert out.dtype == DTYPES[spec.precision], vid
        values[vid] = out
    # b0.attn (fp16) reads b0.norm1 (bf16): its input gradient comes back in bf16
    g = runtime.backward("b0.attn", 0, torch.ones_like(values["b0.attn"]))
    assert g[0].dtype == torch.bfloat16
    # b0.norm1 (bf16) reads embed (fp32): fp32 back
    runtime.backward("b0.res1", 0, torch.ones_like(values["b0.res1"]))
    assert runtime.backward("b0.norm1", 0, g[0])[0].dtype == torch.float32


@pytest.mark.parametrize("mix", [
    dict(default="fp32"),
    dict(default="bf16"),
    dict(default="bf16", embed="fp32", attn="fp16", head="fp32"),
])
def test_per_vnode_runtime_equals_one_autograd_graph(mix):
    """The runtime's VNode-by-VNode backward (casts at the boundaries) equals plain autograd over
    the same modules: same loss, same gradients, whatever the precisions."""
    graph = tiny_graph(**mix)
    tokens = batch(graph)
    runtime = VNodeRuntime(graph, graph.order, 5, CPU)
    step_tokens = tokens.shape[0] * graph.spec.context
    loss = local_step(runtime, [tokens]).loss_sum
    model = ReferenceModel(graph, 5)
    ref = model(tokens[:, :-1], tokens[:, 1:])
    (ref / step_tokens).backward()
    assert loss == pytest.approx(ref.item(), rel=1e-6)
    ref_params = model.named_vnode_parameters()
    for name, p in runtime.parameters().items():
        assert p.grad is not None and p.grad.dtype == p.dtype, name
        torch.testing.assert_close(p.grad.float(), ref_params[name].grad.float(), rtol=1e-2, atol=1e-5)


def test_bf16_activations_and_wire_bytes_are_half_of_fp32():
    sizes = {}
    for precision in ("fp32", "bf16", "fp16"):
        graph = tiny_graph(precision)
        runtime = VNodeRuntime(graph, graph.order, 0, CPU)
        tokens = batch(graph)
        values = {"data.tokens": tokens[:, :-1], "data.targets": tokens[:, 1:]}
        for vid in runtime.order:
            out = runtime.forward(vid, 0, [values[i] for i in graph.vnodes[vid].inputs])
            values[vid] = out
        act = values["b0.attn"]
        frames = tensor_frames("k", act, chunk_bytes=1 << 20)
        reassembler = wire.Reassembler()
        got = None
        for f in frames:
            got = reassembler.feed(f) or got
        assert got is not None
        back = tensor_from_wire(got)
        assert back.dtype == act.dtype and torch.equal(back, act)
        sizes[precision] = (runtime.activation_bytes(), sum(len(f) for f in frames))
    act32, wire32 = sizes["fp32"]
    for low in ("bf16", "fp16"):
        act, wire_bytes = sizes[low]
        assert act / act32 == pytest.approx(0.5, abs=1e-3)  # the fp32 loss scalar aside
        assert wire_bytes / wire32 == pytest.approx(0.5, abs=0.01)  # payload halves; headers are tiny


@pytest.mark.parametrize("mix", [dict(default="bf16"), dict(default="fp16", embed="fp32", head="bf16")])
def test_any_placement_computes_the_same_bits_in_mixed_precision(mix):
    """One PNode or two (the cut crossing precisions): the same losses and weights, bit for bit."""
    from computeall.protocol.config import OptimizerConfig
    from computeall.tensorcore.optimizer import VNodeOptimizer

    graph = tiny_graph(**mix)
    middle = [v for v in graph.order if v.startswith("b1.")]
    placements = {
        "one": [graph.order],
        "two": [[v for v in graph.order if v not in middle], middle],
    }
    results = {}
    for name, parts in placements.items():
        runtimes = [VNodeRuntime(graph, part, 11, CPU) for part in parts]
        optimizers = [VNodeOptimizer(r.parameters(), OptimizerConfig(), r.decay_groups()) for r in runtimes]
        losses = []
        for step in range(3):
            loss = local_step(runtimes, [batch(graph, seed=step)], loss_scale=256.0).loss_sum
            for r, o in zip(runtimes, optimizers):
                o.step(1e-2, 256.0)
                r.zero_grad()
            losses.append(loss)
        params = {n: p.detach().clone() for r in runtimes for n, p in r.parameters().items()}
        results[name] = (losses, params)
    assert results["one"][0] == results["two"][0]
    for n, p in results["one"][1].items():
        assert torch.equal(p, results["two"][1][n]), n
