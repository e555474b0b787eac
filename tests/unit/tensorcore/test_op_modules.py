"""Every registry entry's module path resolves to a torch module that its parameters construct."""

import inspect

import pytest
import torch

from computeall.network.ops import OPS
from computeall.tensorcore.ops import module_class, resolve_module

from .helpers import example_vnode


@pytest.mark.parametrize("name", sorted(OPS))
def test_module_path_resolves_to_a_module_taking_the_params(name: str) -> None:
    op = OPS[name]
    cls = module_class(name)
    assert isinstance(cls, type) and issubclass(cls, torch.nn.Module)
    signature = inspect.signature(cls.__init__)
    fields = set(op.params.model_fields)
    accepted = set(signature.parameters) - {"self"}
    assert fields <= accepted, f"{op.module} does not take {sorted(fields - accepted)}"
    extra = {"weight"} if op.tie is not None else set()  # a tied op is handed the shared weight
    named = {n: p for n, p in signature.parameters.items() if n != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}
    required = {n for n, p in named.items() if p.default is inspect.Parameter.empty}
    assert required <= fields | extra, f"{op.module} needs {sorted(required - fields - extra)}, which {name}'s params lack"


@pytest.mark.parametrize("name", sorted(OPS))
def test_build_vnode_builds_every_op_from_its_example(name: str) -> None:
    op = OPS[name]
    module = example_vnode(name)
    assert isinstance(module, module_class(name))
    own = sum(p.numel() for p in module.parameters())
    assert own == op.param_count(op.params.model_validate(op.example)), "the registry's param count disagrees with the module"


def test_a_bad_module_path_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="does not resolve"):
        resolve_module("computeall.tensorcore.ops.norms:NoSuchNorm")
    with pytest.raises(ValueError, match="not a torch.nn.Module"):
        resolve_module("computeall.tensorcore.ops.attention:rope_tables")
