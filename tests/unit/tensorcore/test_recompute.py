"""Activation recompute: a VNode with `recompute: true` keeps only its inputs in forward and runs its
forward again in backward; the losses and gradients are the same bits, the peak memory is lower."""

import torch

from computeall.kernels.timing import peak_bytes
from computeall.network import Graph, load_network
from computeall.network.head_fusion import fuse_heads
from computeall.tensorcore.local_step import local_step
from computeall.tensorcore.vnode_runtime import VNodeRuntime

from .helpers import TINY, batch

CPU = torch.device("cpu")


def graph(recompute: bool, fused_heads: bool = False) -> Graph:
    text = TINY.format(default="fp32", embed="", attn="", head="")
    text = text.replace("precision: fp32}", f"precision: fp32, recompute: {str(recompute).lower()}}}")
    spec = load_network(text)
    assert all(v.recompute == recompute for v in spec.vnodes)
    return Graph(spec)


def train(g: Graph, steps: int = 2):
    runtime = VNodeRuntime(g, g.order, 4, CPU)
    losses = []
    for step in range(steps):
        runtime.zero_grad()
        losses.append(local_step(runtime, [batch(g, n=2, seed=step + 10 * m) for m in range(2)]).loss_sum)
    return losses, {n: p.grad for n, p in runtime.parameters().items()}, runtime


def test_recompute_gives_the_same_bits():
    plain_losses, plain_grads, _ = train(graph(False))
    losses, grads, runtime = train(graph(True))
    assert losses == plain_losses
    assert grads.keys() == plain_grads.keys()
    for name, g in grads.items():
        assert torch.equal(g, plain_grads[name]), name
    assert runtime.activation_bytes() == 0  # nothing left over after the backward


def test_recompute_lowers_the_peak():
    peaks = {}
    for recompute in (False, True):
        g = graph(recompute)
        runtime = VNodeRuntime(g, g.order, 4, CPU)
        tokens = [batch(g, n=32)]
        local_step(runtime, tokens)  # warm up (kernel choices, lazily built tables)
        runtime.zero_grad()
        peaks[recompute] = peak_bytes(lambda: local_step(runtime, tokens), CPU)
    assert peaks[True] < 0.85 * peaks[False], peaks


def test_head_fusion_keeps_the_recompute_setting():
    text = (TINY.format(default="fp32", embed="", attn="", head="")
            .replace("precision: fp32}", "precision: fp32, recompute: true}"))
    spec, _ = fuse_heads(load_network(text))
    assert all(v.recompute for v in spec.vnodes)


def test_a_recomputing_sum_keeps_nothing_of_its_inputs():
    """`add`'s backward reads no input values: recomputing, it holds no activation at all."""
    g = graph(True)
    runtime = VNodeRuntime(g, g.order, 4, CPU)
    tokens = batch(g, n=2)
    values = {"data.tokens": tokens[:, :-1], "data.targets": tokens[:, 1:]}
    for vid in g.order:
        if g.vnodes[vid].op == "add":
            runtime.drop()  # only the sum's own keeping is measured
            runtime.forward(vid, 0, [values[i] for i in g.vnodes[vid].inputs])
            assert runtime.activation_bytes() <= 8, vid  # a stand-in's one element per input
            return
        values[vid] = runtime.forward(vid, 0, [values[i] for i in g.vnodes[vid].inputs])
    raise AssertionError("the network has no add VNode")
