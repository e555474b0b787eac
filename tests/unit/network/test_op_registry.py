"""Every op in the registry has every part, and nothing outside it branches on op names."""

from pathlib import Path

import pytest

from computeall.network import Graph, NetworkError, load_network
from computeall.network.ops import OPS, OpParams, Problem, Site, n_inputs
from computeall.network.ops.spec import width_preserving
from computeall.network.memory_model import StepShape, VNodeMemory, vnode_memory
from computeall.orchestrator.step_time import vnode_flops_per_token

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("name", sorted(OPS))
def test_every_op_has_every_part(name: str) -> None:
    op = OPS[name]
    assert op.name == name
    assert issubclass(op.params, OpParams)
    params = op.params.model_validate(op.example)  # the example is valid parameters
    count = n_inputs(op, params)
    assert isinstance(count, int) and count >= 1
    problems = op.check(params, [f"x{i}" for i in range(count)])
    assert isinstance(problems, list) and all(isinstance(p, Problem) for p in problems)
    assert isinstance(op.param_count(params), int) and op.param_count(params) >= 0
    if op.out_features is None:  # elementwise: widths come from the inputs, so it expects none of its own
        assert op.in_features is None
    else:
        assert op.out_features(params) >= 1
        assert op.in_field in op.params.model_fields, f"{name}: in_field {op.in_field!r} is not a parameter"
        wants = op.expected_in_features(params, count)
        assert len(wants) == count and all(isinstance(w, int) and w >= 1 for w in wants)
    site = Site(context=32, features=8)
    flops = op.flops_per_token(params, site)
    assert isinstance(flops, float) and flops > 0
    activations = op.activation_elements(params, site)
    assert isinstance(activations, int) and activations > 0
    module_path, _, class_name = op.module.partition(":")
    assert module_path.startswith("computeall.tensorcore.ops.") and class_name.isidentifier(), op.module
    if op.tie is not None:
        assert op.tie.op in OPS
        assert all(f in op.params.model_fields and f in OPS[op.tie.op].params.model_fields for f in op.tie.same)


def test_there_is_a_loss_op() -> None:
    assert any(op.is_loss for op in OPS.values())


@pytest.mark.parametrize("path", ["libs/network/loader.py", "libs/network/graph.py", "services/orchestrator/allocator.py",
                                  "services/orchestrator/step_time.py"])
def test_no_op_names_outside_the_registry(path: str) -> None:
    source = (ROOT / path).read_text()
    named = [name for name in OPS if f'"{name}"' in source or f"'{name}'" in source]
    assert not named, f"{path} names ops {named}: declare what it needs in the op's registry entry instead"


class ScaleParams(OpParams):
    dim: int


def _scale_check(p: ScaleParams, inputs: list[str]) -> list[Problem]:
    return [Problem("dim", "must be even")] if p.dim % 2 else []


SCALE = width_preserving(
    name="scale",
    params=ScaleParams,
    param_count=lambda p: p.dim,
    check=_scale_check,
    flops_per_token=lambda p, site: 123.0,
    activation_elements=lambda p, site: 5 * site.features,
    module="computeall.tensorcore.ops.norms:RMSNorm",
    example={"dim": 8},
)

NETWORK = """
name: scaled
vocab_size: 64
context: 16
defaults: {{dim: {dim}}}
vnodes:
  - {{id: embed, op: embedding, inputs: [data.tokens]}}
  - {{id: s, op: scale, inputs: [embed]}}
  - {{id: head, op: tied_lm_head_ce, inputs: [s, data.targets], tie: embed}}
"""


def test_a_new_op_is_one_registry_entry(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(OPS, "scale", SCALE)
    graph = Graph(load_network(NETWORK.format(dim=8)))
    assert graph.param_count("s") == 8
    assert vnode_flops_per_token(graph, "s") == 123.0
    # fp32: weight, gradient and Adam's moments held; a micro-batch's activations; the default working memory
    assert vnode_memory(graph, "s", StepShape(2)) == VNodeMemory(
        held=8 * (2 * 4 + 8), busy=2 * 16 * (5 * 8) * 4, working=12 * 8 * 2 * 16 * 4, update=8 * 4)
    with pytest.raises(NetworkError, match=r"vnode 's', field 'dim': must be even"):
        load_network(NETWORK.format(dim=7))
