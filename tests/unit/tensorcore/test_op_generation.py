"""Every op's sampling form, as its registry entry declares it (`OpSpec.generation`), computes what its
training module computes over the whole sequence: a prompt, then one new position at a time through
the KV cache. An op that mixes positions but is declared position-wise fails here, instead of
generating wrong tokens. The Llama export's parts are alike across the ops that declare them."""

from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn.functional as F

from computeall.network.ops import DATA_INPUTS, OPS, n_inputs
from computeall.tensorcore.generation import STEPS, KVCache

from .helpers import example_vnode

B, T, PROMPT = 2, 7, 3
ELEMENTWISE_WIDTH = 8  # an op without input widths of its own (a sum) reads any width


def example_inputs(name: str, generator: torch.Generator) -> tuple[list[str], list[torch.Tensor]]:
    """Inputs the entry's own shape check accepts, with an activation wherever it allows one, and tensors for them:
    token ids for the data, (B, T, width) activations of the widths the entry expects."""
    op = OPS[name]
    params = op.params.model_validate(op.example)
    count = n_inputs(op, params)
    choices = [(f"v{i}", *DATA_INPUTS) for i in range(count)]
    accepted = [names for names in itertools.product(*choices) if not op.check(params, list(names))]
    assert accepted, f"{name}'s example takes no inputs its check accepts"
    names = min(accepted, key=lambda names: sum(n in DATA_INPUTS for n in names))
    widths = op.expected_in_features(params, count) if op.in_features else [ELEMENTWISE_WIDTH] * count
    vocab = getattr(params, "vocab_size", 16)
    tensors = [torch.randint(0, vocab, (B, T), generator=generator) if n in DATA_INPUTS
               else torch.randn(B, T, width, generator=generator) for n, width in zip(names, widths)]
    return list(names), tensors


def stepwise(name: str, module: torch.nn.Module, inputs: list[torch.Tensor]) -> torch.Tensor:
    """The op as sampling runs it: the prompt's positions at once, then one at a time, the cache moving on."""
    cache, outputs = KVCache(T), []
    for lo, hi in [(0, PROMPT), *((t, t + 1) for t in range(PROMPT, T))]:
        outputs.append(STEPS[OPS[name].generation](module, [x[:, lo:hi] for x in inputs], cache, "v"))
        cache.length = hi
    return torch.cat(outputs, dim=1)


SAMPLED = sorted(name for name, op in OPS.items() if op.generation in ("position_wise", "kv_cache"))


@pytest.mark.parametrize("name", SAMPLED)
@torch.no_grad()
def test_sampling_an_op_a_position_at_a_time_equals_its_whole_sequence(name):
    generator = torch.Generator().manual_seed(0)
    module = example_vnode(name).eval()
    names, inputs = example_inputs(name, generator)
    assert "data.targets" not in names, f"{name} reads the targets, which sampling has not: its generation is None"
    whole = module(*inputs)
    assert torch.allclose(stepwise(name, module, inputs), whole, atol=1e-5, rtol=0), \
        f"{name} computes otherwise one position at a time: if it mixes positions, its generation is 'kv_cache'"


@pytest.mark.parametrize("name", sorted(name for name, op in OPS.items() if op.generation == "logits"))
@torch.no_grad()
def test_a_loss_ops_logits_are_the_ones_its_loss_is_the_cross_entropy_of(name):
    generator = torch.Generator().manual_seed(0)
    module = example_vnode(name).eval()
    _, (x, targets) = example_inputs(name, generator)
    logits = STEPS["logits"](module, [x], KVCache(T), "v")
    expected = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="sum")
    assert torch.allclose(module(x, targets), expected, atol=1e-4, rtol=1e-5)


@pytest.mark.parametrize("name", sorted(OPS))
def test_every_op_says_how_sampling_runs_it(name):
    op = OPS[name]
    if op.is_loss:
        assert op.generation in ("logits", None), f"loss op {name}: sampling reads its logits, or refuses it"
    else:
        assert op.generation != "logits", f"{name} is no loss: sampling cannot read logits from it"


def test_the_ops_of_one_llama_part_have_the_parameters_the_export_maps():
    """hf_export maps a part's parameters by name (`llama_pieces`), whichever op of the part a VNode is."""
    by_part: dict[str, set[tuple[str, ...]]] = {}
    for name, op in OPS.items():
        if op.llama is not None and op.tie is None:
            by_part.setdefault(op.llama, set()).add(tuple(sorted(n for n, _ in example_vnode(name).named_parameters())))
    assert all(len(names) == 1 for names in by_part.values()), by_part
    assert {"embedding", "norm", "attention", "mlp", "residual", "head"} <= set(by_part)
