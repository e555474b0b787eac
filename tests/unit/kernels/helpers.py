"""Shared tolerances and reference checks for the kernel tests."""

import torch

from computeall.kernels.attention_reference import attention_reference

# Absolute tolerances against the fp32 reference on O(1) values: fp32 paths agree to rounding;
# bf16 keeps 8 mantissa bits (~4e-3 relative), fp16 keeps 11 (~5e-4).
TOL = {torch.float32: 2e-4, torch.float16: 4e-3, torch.bfloat16: 3e-2}


def assert_close(actual: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype, scale: float = 1.0) -> None:
    torch.testing.assert_close(actual.float(), expected.float(), atol=TOL[dtype] * scale, rtol=TOL[dtype] * scale)


def check_attention(attn, b, h, t, d, dtype, causal, device="cpu"):
    """attn(q, k, v, causal) matches the reference in output and in all three gradients."""
    q, k, v = (torch.randn(b, h, t, d, device=device).to(dtype).requires_grad_() for _ in range(3))
    out = attn(q, k, v, causal)
    assert out.shape == q.shape and out.dtype == dtype
    grad_out = torch.randn_like(out)
    grads = torch.autograd.grad(out, (q, k, v), grad_out)
    expected = attention_reference(q, k, v, causal)
    expected_grads = torch.autograd.grad(expected, (q, k, v), grad_out)
    assert_close(out, expected, dtype)
    for got, want in zip(grads, expected_grads):
        # Gradients sum over T terms, so their rounding grows with T.
        assert_close(got, want, dtype, scale=4.0)
