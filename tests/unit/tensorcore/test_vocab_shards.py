"""A tied embedding and head split by vocabulary: the same bits as unsplit (init, losses, gradients,
updates) on any placement of the shards, the right cross-entropy, and state mapped exactly between forms."""

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from computeall.kernels.lce_vocab import linear_cross_entropy_sharded
from computeall.network import Graph, load_network
from computeall.network.vocab_split import split_vocab, vocab_groups
from computeall.protocol.config import OptimizerConfig
from computeall.tensorcore.head_state_mapping import source_vnodes, vnode_state
from computeall.tensorcore.local_step import local_step
from computeall.tensorcore.optimizer import VNodeOptimizer
from computeall.tensorcore.vnode_runtime import VNodeRuntime

MICRO = (Path(__file__).resolve().parents[3] / "examples" / "networks" / "llama-micro.yaml").read_text()
CPU = torch.device("cpu")
SHARDS = [f"embed.shard{s}" for s in range(4)]


def _placements(graph: Graph) -> list[list[list[str]]]:
    """One runtime for all; the shards over three runtimes, in an order that is not the shards' own."""
    rest = [v for v in graph.order if ".shard" not in v]
    units = [[f"embed.shard{s}", f"head.shard{s}"] for s in range(4)]
    return [[graph.order], [units[2] + units[0], units[3] + rest, units[1]]]


def _train(graph: Graph, hosts: list[list[str]], steps: int = 3) -> tuple[list[float], dict[str, torch.Tensor]]:
    """`steps` optimizer steps of two micro-batches each; losses and every parameter, shards joined into `embed.weight`."""
    runtimes = [VNodeRuntime(graph, vnodes, 11, CPU) for vnodes in hosts]
    optimizers = [VNodeOptimizer(r.parameters(), OptimizerConfig(), r.decay_groups()) for r in runtimes]
    data = torch.Generator().manual_seed(2)
    micro = [torch.randint(0, graph.spec.vocab_size, (2, graph.spec.context + 1), generator=data) for _ in range(2)]
    losses = []
    for _ in range(steps):  # the same batch each step: the loss must fall
        losses.append(local_step(runtimes, micro, loss_scale=8.0).loss_sum)
        for opt in optimizers:
            opt.step(lr=1e-2, loss_scale=8.0)
    params = {k: p.detach() for r in runtimes for k, p in r.parameters().items()}
    if "embed.shard0.weight" in params:
        params["embed.weight"] = torch.cat([params.pop(f"{s}.weight") for s in SHARDS])
    return losses, params


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_the_split_network_trains_to_the_bits_of_the_unsplit_one_on_any_placement(precision):
    spec = load_network(MICRO.replace("precision: fp32", f"precision: {precision}"))
    unsplit = Graph(spec)
    split = Graph(split_vocab(spec)[0])
    want_losses, want = _train(unsplit, [unsplit.order])
    for hosts in _placements(split):
        losses, got = _train(split, hosts)
        assert losses == want_losses, f"{len(hosts)} runtimes"
        assert set(got) == set(want)
        for name, p in want.items():
            assert torch.equal(got[name], p), f"{name} on {len(hosts)} runtimes"
    assert want_losses[-1] < want_losses[0]


def test_the_sharded_cross_entropy_is_cross_entropy():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(3, 10, 16, generator=gen, requires_grad=True)
    w = (torch.randn(100, 16, generator=gen) * 0.5).requires_grad_(True)
    targets = torch.randint(0, 100, (3, 10), generator=gen)
    targets[0, :3] = -100
    bounds = [(0, 32), (32, 64), (64, 96), (96, 100)]
    for reduction in ("sum", "mean"):
        ours = linear_cross_entropy_sharded(x, w, targets, bounds, reduction=reduction)
        gx, gw = torch.autograd.grad(ours * 3.0, (x, w))
        ref = F.cross_entropy((x @ w.T).reshape(-1, 100), targets.reshape(-1), reduction=reduction)
        rx, rw = torch.autograd.grad(ref * 3.0, (x, w))
        torch.testing.assert_close(ours, ref, rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(gx, rx, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(gw, rw, rtol=1e-5, atol=1e-6)


def _state(graph: Graph) -> dict[str, torch.Tensor]:
    runtime = VNodeRuntime(graph, graph.order, 4, CPU)
    optimizer = VNodeOptimizer(runtime.parameters(), OptimizerConfig(), runtime.decay_groups())
    for p in runtime.parameters().values():
        p.grad = torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel()))
    optimizer.step(lr=1e-2)  # Adam state that is not zero
    state = {f"param/{k}": p.detach().clone() for k, p in runtime.parameters().items()}
    return state | {f"optim/{k}": t for k, t in optimizer.state_dict().items()}


def test_state_maps_between_the_forms_exactly_and_from_either_checkpoint():
    spec = load_network(MICRO)
    split_spec = split_vocab(spec)[0]
    unsplit_state, split_state = _state(Graph(spec)), _state(Graph(split_spec))
    assert vocab_groups(spec)[0].shard_ids == vocab_groups(split_spec)[0].shard_ids == tuple(SHARDS)
    assert source_vnodes(split_spec, "embed.shard2") == ["embed.shard2", "embed"]
    assert source_vnodes(spec, "embed") == ["embed", *SHARDS]
    # a split session starting from an unsplit object (a Hugging Face model, an old checkpoint) and back
    objects = {"embed": {k: t for k, t in unsplit_state.items() if k.split("/")[1].startswith("embed.weight")}}
    shard = vnode_state(objects, split_spec, "embed.shard2")
    assert torch.equal(shard["param/embed.shard2.weight"], unsplit_state["param/embed.weight"][256:384])
    assert torch.equal(shard["optim/embed.shard2.weight.exp_avg_sq"], unsplit_state["optim/embed.weight.exp_avg_sq"][256:384])
    assert torch.equal(shard["optim/embed.shard2.weight.step"], unsplit_state["optim/embed.weight.step"])
    assert vnode_state(objects, split_spec, "embed") == {}  # the gather holds nothing
    assert source_vnodes(split_spec, "head.shard1") == ["head.shard1", "head"]  # nor a head shard: the loss's object serves
    assert vnode_state({"head": {}}, split_spec, "head.shard1") == {}
    shards = {s: {k: t for k, t in split_state.items() if k.split("/")[1].startswith(f"{s}.weight")} for s in SHARDS}
    joined = vnode_state(shards, spec, "embed")
    assert torch.equal(joined["param/embed.weight"], torch.cat([split_state[f"param/{s}.weight"] for s in SHARDS]))
    assert torch.equal(joined["optim/embed.weight.exp_avg"], torch.cat([split_state[f"optim/{s}.weight.exp_avg"] for s in SHARDS]))
    back = {s: vnode_state({"embed": joined}, split_spec, s) for s in SHARDS}
    for s in SHARDS:
        assert back[s].keys() == shards[s].keys() and all(torch.equal(back[s][k], shards[s][k]) for k in back[s])
