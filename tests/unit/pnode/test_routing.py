"""Tensor routes between PNodes: what goes on the wire, where it lands, and what is refused."""

import pytest

from computeall.pnode.routing import ActivationKey, GradientKey, TensorRoute
from computeall.protocol.wire import WireError


def test_a_route_survives_the_wire_and_names_its_inbox_slot():
    act = TensorRoute.activation("s", "train", 7, 1, src="b0.attn")
    grad = TensorRoute.gradient("s", "val", 7, 1, src="b0.norm1", consumer="b0.attn")
    assert TensorRoute.from_wire(act.wire_key, act.wire_meta()) == act
    assert TensorRoute.from_wire(grad.wire_key, grad.wire_meta()) == grad
    assert act.inbox_key == ActivationKey("train", 7, 1, "b0.attn")
    assert grad.inbox_key == GradientKey("val", 7, 1, "b0.norm1", "b0.attn")
    assert act.wire_key == "s/train/7/1/act/b0.attn"
    assert grad.wire_key == "s/val/7/1/grad/b0.norm1/b0.attn"  # two consumers' gradients never share a key
    assert "consumer" not in act.wire_meta()


@pytest.mark.parametrize("meta, named", [
    ({"session": "s", "phase": "train", "step": 0, "micro": 0, "kind": "act"}, "src"),
    ({"session": "s", "phase": "train", "step": 0, "micro": 0, "kind": "grad", "src": "a"}, "consumer"),
    ({"session": "s", "phase": "later", "step": 0, "micro": 0, "kind": "act", "src": "a"}, "phase"),
    ({"session": "s", "phase": "train", "step": "x", "micro": 0, "kind": "act", "src": "a"}, "step"),
])
def test_incomplete_routing_is_refused_naming_the_field(meta, named):
    with pytest.raises(WireError, match="incomplete routing metadata") as err:
        TensorRoute.from_wire("k", meta)
    assert named in str(err.value)
