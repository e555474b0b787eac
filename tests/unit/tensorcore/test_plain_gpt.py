"""The plain torch model stays an outside reference: torch's modules only, and every weight of a run maps onto it."""

from pathlib import Path

import pytest
import torch

from computeall.network import Graph, load_network, load_network_file
from computeall.network.per_head import per_head_gpt
from computeall.tensorcore.plain_gpt import GPT, GPTShape, NoCounterpart, vnode_names
from computeall.tensorcore.vnode_runtime import VNodeRuntime

from ..tools import load_tool

NETWORKS = Path(__file__).resolve().parents[3] / "examples" / "networks"


def test_it_imports_nothing_of_ours_but_the_network_yaml():
    graph = load_tool("import_graph")
    ours = {i.imported for i in graph.imports() if i.importer == "computeall.tensorcore.plain_gpt"
            and i.imported.startswith("computeall.")}
    assert ours and all(name.startswith("computeall.network") for name in ours), ours


@pytest.mark.parametrize("network", ["micro-gpt.yaml", "tiny-gpt.yaml"])
def test_every_vnode_parameter_is_one_module_parameter_of_its_shape(network):
    spec = load_network_file(NETWORKS / network)
    names = vnode_names(spec)
    model = GPT(GPTShape.from_spec(spec))
    graph = Graph(spec)
    ours = VNodeRuntime(graph, graph.order, 1, torch.device("cpu")).parameters()
    assert sorted(names) == sorted(n for n, _ in model.named_parameters())
    assert sorted(names.values()) == sorted(ours)  # one to one: no VNode parameter twice, none left out
    shapes = dict(model.named_parameters())
    assert all(shapes[mine].shape == ours[theirs].shape for mine, theirs in names.items())


def test_loaded_weights_come_back_under_their_vnode_names():
    spec = load_network_file(NETWORKS / "micro-gpt.yaml")
    graph = Graph(spec)
    weights = {k: p.detach().clone() for k, p in VNodeRuntime(graph, graph.order, 3, torch.device("cpu")).parameters().items()}
    names = vnode_names(spec)
    model = GPT(GPTShape.from_spec(spec))
    model.load_vnode_weights(weights, names)
    back = model.vnode_weights(names)
    assert all(torch.equal(back[k], weights[k]) for k in weights)
    assert torch.equal(model.blocks[1].mlp.down.weight, weights["b1.mlp.down.weight"])
    assert torch.equal(model.blocks[0].norm2.weight, weights["b0.norm2.weight"])


def test_decay_groups_are_the_layers_matrices():
    model = GPT(GPTShape.from_spec(load_network_file(NETWORKS / "micro-gpt.yaml")))
    decayed, rest = model.param_groups(0.1)
    assert decayed["weight_decay"] == 0.1 and rest["weight_decay"] == 0.0
    assert all(p.dim() == 2 for p in decayed["params"]) and all(p is not model.embed.weight for p in decayed["params"])
    assert len(decayed["params"]) + len(rest["params"]) == len(list(model.parameters()))


def test_a_network_it_cannot_express_is_refused_by_name():
    spec = load_network(per_head_gpt(heads=2, blocks=1, dim=32, context=16, vocab=64, name="heads"))
    with pytest.raises(NoCounterpart, match="attention_head"):
        vnode_names(spec)
