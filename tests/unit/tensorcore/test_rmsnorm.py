"""RMSNorm keeps its input and one fp32 statistic a token for its backward, and gives the bits of
torch's rms_norm under autograd (which keeps the input's fp32 copy and the normalised input)."""

import pytest
import torch
import torch.nn.functional as F

from computeall.tensorcore.ops.norms import RMSNorm

from .helpers import saved_bytes


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", [(2, 16, 64), (5, 64)])
def test_rmsnorm_gives_torchs_bits_and_keeps_its_input_only(dtype, shape):
    torch.manual_seed(0)
    norm = RMSNorm(shape[-1]).to(dtype)
    with torch.no_grad():
        norm.weight.add_(0.1 * torch.randn(shape[-1]).to(dtype))
    x = torch.randn(*shape, dtype=dtype, requires_grad=True)
    dy = torch.randn(*shape, dtype=dtype)

    def torchs(x):
        return F.rms_norm(x.float(), norm.weight.shape, norm.weight.float(), norm.eps).to(x.dtype)

    ours, theirs = norm(x), torchs(x)
    assert torch.equal(ours, theirs)
    for a, b in zip(torch.autograd.grad(ours, [x, norm.weight], dy), torch.autograd.grad(theirs, [x, norm.weight], dy)):
        assert torch.equal(a, b)
    tokens = x.numel() // shape[-1]
    assert saved_bytes(norm, x) == x.numel() * x.element_size() + tokens * 4
    assert saved_bytes(torchs, x) >= 2 * x.numel() * 4
