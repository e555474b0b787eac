"""Weight-decay groups: layers' matrices decay; biases, norms and embeddings (the tied LM head's weight
included) do not, unless configured otherwise, and training matches torch's AdamW with the param
groups a nanoGPT user would build by hand."""

import pytest
import torch
from torch import nn

from computeall.protocol.config import OptimizerConfig
from computeall.tensorcore.local_step import local_step
from computeall.tensorcore.optimizer import VNodeOptimizer
from computeall.tensorcore.reference_model import ReferenceModel
from computeall.tensorcore.vnode_runtime import VNodeRuntime

from .helpers import batch, tiny_graph

CPU = torch.device("cpu")
LR = 1e-2


def test_groups_say_what_each_parameter_is():
    graph = tiny_graph()
    groups = VNodeRuntime(graph, graph.order, 0, CPU).decay_groups()
    assert groups["embed.weight"] == "embedding"  # also the tied LM head's weight: head has none of its own
    assert not any(name.startswith("head.") for name in groups)
    assert {groups[n] for n in groups if ".norm" in n or n.startswith("norm_f.")} == {"norm"}
    assert {groups[n] for n in groups if ".attn." in n or ".mlp." in n} == {"weights"}
    assert groups == ReferenceModel(graph, 0).decay_groups()


def nanogpt_groups(model: nn.Module, decay_embeddings: bool, weight_decay: float) -> list[dict]:
    """By hand, from the modules: the weights of nn.Linear layers decay (and the embedding, if asked)."""
    linear = {id(m.weight) for m in model.modules() if isinstance(m, nn.Linear)}
    embedding = {id(model.vnodes["embed"].weight)}
    decayed = linear | (embedding if decay_embeddings else set())
    params = list(model.parameters())
    return [{"params": [p for p in params if id(p) in decayed], "weight_decay": weight_decay},
            {"params": [p for p in params if id(p) not in decayed], "weight_decay": 0.0}]


@pytest.mark.parametrize("no_decay", [["bias", "norm", "embedding"], ["bias", "norm"]])
def test_training_matches_torch_adamw_with_hand_built_groups(no_decay):
    graph = tiny_graph()
    config = OptimizerConfig(weight_decay=0.5, no_decay=no_decay)  # strong decay, so a wrong group shows
    runtime = VNodeRuntime(graph, graph.order, 2, CPU)
    ours = VNodeOptimizer(runtime.parameters(), config, runtime.decay_groups())
    model = ReferenceModel(graph, 2)
    theirs = torch.optim.AdamW(nanogpt_groups(model, "embedding" not in no_decay, config.weight_decay),
                               lr=LR, betas=config.betas, eps=config.eps)
    for step in range(3):
        tokens = batch(graph, seed=step)
        local_step(runtime, [tokens])
        ours.step(LR)
        runtime.zero_grad()
        (model(tokens[:, :-1], tokens[:, 1:]) / tokens[:, 1:].numel()).backward()
        theirs.step()
        theirs.zero_grad()
    reference = model.named_vnode_parameters()
    for name, p in runtime.parameters().items():
        torch.testing.assert_close(p, reference[name], rtol=1e-5, atol=1e-5, msg=name)


def test_the_embedding_moves_differently_when_it_decays():
    graph = tiny_graph()
    embeddings = []
    for no_decay in (["bias", "norm", "embedding"], ["bias", "norm"]):
        runtime = VNodeRuntime(graph, graph.order, 2, CPU)
        optimizer = VNodeOptimizer(runtime.parameters(), OptimizerConfig(weight_decay=0.5, no_decay=no_decay),
                                   runtime.decay_groups())
        local_step(runtime, [batch(graph)])
        optimizer.step(LR)
        embeddings.append(runtime.parameters()["embed.weight"].detach().clone())
    assert (embeddings[0] - embeddings[1]).abs().max() > 1e-5
