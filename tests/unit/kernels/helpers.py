"""Shared tolerances and reference checks for the kernel tests."""

import torch

from computeall.kernels.attention_reference import attention_reference
from computeall.kernels.lce_reference import linear_cross_entropy_reference

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


def check_linear_cross_entropy(lce, n, d, vocab, dtype, reduction, device="cpu"):
    """lce(x, weight, targets, ignore_index, reduction) matches the reference in loss and gradients."""
    x = torch.randn(n, d, device=device).to(dtype).requires_grad_()
    weight = (torch.randn(vocab, d, device=device) / d**0.5).to(dtype).requires_grad_()
    targets = torch.randint(0, vocab, (n,), device=device)
    targets[1::5] = -100  # ignored tokens (none when n == 1)
    loss = lce(x, weight, targets, -100, reduction)
    # A non-unit upstream gradient checks that backward scales the precomputed gradients.
    grads = torch.autograd.grad(loss * 3.0, (x, weight))
    expected = linear_cross_entropy_reference(x, weight, targets, -100, reduction)
    expected_grads = torch.autograd.grad(expected * 3.0, (x, weight))
    assert_close(loss, expected, dtype, scale=n if reduction == "sum" else 1.0)
    for got, want in zip(grads, expected_grads):
        assert got.dtype == dtype
        assert_close(got, want, dtype)
