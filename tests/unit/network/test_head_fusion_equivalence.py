"""Fused and unfused networks from one seed are the same model: same init, same losses over 20 steps,
the same parameters after the mapping, and a session may switch topology at a resume."""

import pytest
import torch

from computeall.network import Graph, load_network
from computeall.network.head_fusion import fuse_heads, head_groups
from computeall.tensorcore.head_state_mapping import convert_state, to_fused, to_unfused
from computeall.tensorcore.reference_model import ReferenceModel

from .head_training import Trainer, batches
from computeall.network.per_head import per_head_gpt

SEED, STEPS, MICRO, MICRO_SIZE = 11, 20, 2, 2


@pytest.fixture(scope="module")
def specs():
    unfused = load_network(per_head_gpt(heads=4, blocks=2, dim=64, context=32, vocab=128))
    fused, lines = fuse_heads(unfused)
    assert len(lines) == 2 and all(line.startswith("fused") for line in lines)
    return unfused, fused


@pytest.fixture(scope="module")
def data(specs):
    return batches(specs[0].vocab_size, specs[0].context, STEPS, MICRO, MICRO_SIZE)


def params_of(trainer: Trainer) -> dict[str, torch.Tensor]:
    return {f"param/{n}": p.detach().clone() for n, p in trainer.params.items()}


def assert_close_states(a: dict, b: dict, atol: float) -> None:
    assert sorted(a) == sorted(b)
    for k in a:
        assert a[k].shape == b[k].shape, k
        assert torch.allclose(a[k], b[k], atol=atol, rtol=0), (k, (a[k] - b[k]).abs().max().item())


def test_same_seed_same_init_exactly(specs):
    unfused, fused = specs
    a, b = Trainer(unfused, SEED), Trainer(fused, SEED)
    groups = head_groups(fused)
    mapped = to_fused(params_of(a), groups)
    assert sorted(mapped) == sorted(params_of(b))
    for k, v in params_of(b).items():
        assert torch.equal(mapped[k], v), k  # bit-identical: the fused VNode draws each head from its own seed
    # and the single-process models agree on the loss of one batch
    tokens = batches(unfused.vocab_size, unfused.context, 1, 1, 3, seed=5)[0][0]
    la = ReferenceModel(Graph(unfused), SEED)(tokens[:, :-1], tokens[:, 1:])
    lb = ReferenceModel(Graph(fused), SEED)(tokens[:, :-1], tokens[:, 1:])
    assert torch.allclose(la, lb, rtol=1e-6)


def test_twenty_steps_same_losses_and_parameters_after_mapping(specs, data):
    unfused, fused = specs
    a, b = Trainer(unfused, SEED), Trainer(fused, SEED)
    la = [a.step(s, data[s]) for s in range(STEPS)]
    lb = [b.step(s, data[s]) for s in range(STEPS)]
    for s, (x, y) in enumerate(zip(la, lb)):
        assert abs(x - y) <= 1e-5 * abs(x), f"step {s}: unfused {x} vs fused {y}"
    assert la[-1] < la[0] - 0.3, "the network should learn"
    groups = head_groups(fused)
    assert_close_states(to_fused(a.state(), groups), b.state(), atol=1e-5)
    assert_close_states(a.state(), to_unfused(b.state(), groups), atol=1e-5)
    # VNode calls per step (forward + backward, both micro-batches): 4 heads + concat become one VNode
    n_unfused, n_fused = len(unfused.vnodes), len(fused.vnodes)
    assert (a.calls, b.calls) == (STEPS * MICRO * 2 * n_unfused, STEPS * MICRO * 2 * n_fused)
    assert n_unfused - n_fused == 2 * 4


@pytest.mark.parametrize("first, second", [("unfused", "fused"), ("fused", "unfused")])
def test_resume_across_topologies(specs, data, first, second):
    """10 steps in one form, checkpoint, resume in the other form for 10 more: the same run as 20 straight."""
    forms = dict(zip(("unfused", "fused"), specs))
    straight = Trainer(forms[first], SEED)
    straight_losses = [straight.step(s, data[s]) for s in range(STEPS)]

    before = Trainer(forms[first], SEED)
    losses = [before.step(s, data[s]) for s in range(STEPS // 2)]
    checkpoint = before.state()
    after = Trainer(forms[second], SEED + 1)  # a different seed: everything must come from the checkpoint
    after.load(convert_state(checkpoint, forms[second]))
    losses += [after.step(s, data[s]) for s in range(STEPS // 2, STEPS)]

    for s, (x, y) in enumerate(zip(straight_losses, losses)):
        assert abs(x - y) <= 1e-5 * abs(x), f"step {s}: straight {x} vs resumed {y}"
    # and back: the resumed run's final state, mapped to the first form, is the straight run's
    assert_close_states(convert_state(after.state(), forms[first]), straight.state(), atol=1e-5)
