"""The SwiGLU MLP keeps only its input and gate_up's output for its backward, and its gradients are
the bits autograd gives the same composition of torch functions (which keeps two hidden widths more)."""

import pytest
import torch
import torch.nn.functional as F

from computeall.tensorcore.ops.swiglu import SwiGLU

from .helpers import saved_bytes


def _autograd(m: SwiGLU, x: torch.Tensor) -> torch.Tensor:
    gate, up = F.linear(x, m.gate_up.weight).chunk(2, dim=-1)
    return F.linear(F.silu(gate) * up, m.down.weight)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_swiglu_gives_autograds_bits_and_keeps_two_hidden_widths_less(dtype):
    torch.manual_seed(0)
    m = SwiGLU(64, 176)
    m.reset_parameters(torch.Generator().manual_seed(1))
    m = m.to(dtype)
    x = torch.randn(2, 32, 64, dtype=dtype, requires_grad=True)
    dy = torch.randn(2, 32, 64, dtype=dtype)
    params = [x, m.gate_up.weight, m.down.weight]
    ours, theirs = m(x), _autograd(m, x)
    assert torch.equal(ours, theirs)
    for a, b in zip(torch.autograd.grad(ours, params, dy), torch.autograd.grad(theirs, params, dy)):
        assert torch.equal(a, b)
    element, tokens = x.element_size(), 2 * 32
    assert saved_bytes(m, x) == tokens * (64 + 2 * 176) * element
    assert saved_bytes(lambda x: _autograd(m, x), x) >= tokens * (64 + 4 * 176) * element
