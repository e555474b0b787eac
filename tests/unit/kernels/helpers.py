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


def check_fused_adamw(impl, dtype, device="cpu", steps=3, shapes=((5, 3), (7,), (33, 2))):
    """FusedAdamW matches the unfused reference over several steps, with loss scaling, lr changes and one overflow."""
    from computeall.kernels import FusedAdamW
    from computeall.kernels.adamw_reference import adamw_reference_step

    params = [torch.randn(s, device=device).to(dtype).requires_grad_() for s in shapes]
    ref_params = [p.detach().clone().requires_grad_() for p in params]
    masters = [p.detach().float() for p in params]
    exp_avgs = [torch.zeros_like(m) for m in masters]
    exp_avg_sqs = [torch.zeros_like(m) for m in masters]
    opt = FusedAdamW(params, lr=1e-2, betas=(0.9, 0.99), weight_decay=0.1, impl=impl)
    scale, applied = 64.0, 0
    for i in range(steps + 1):
        lr = 1e-2 * (i + 1)  # a schedule changes lr every step
        grads = [torch.randn(s, device=device) * scale for s in shapes]
        if i == 1:
            grads[1][0] = float("inf")  # this step must be skipped entirely
        for p, r, g in zip(params, ref_params, grads):
            p.grad, r.grad = g.to(dtype), g.to(dtype)
        opt.lr = lr
        found = opt.step(grad_scale=scale)
        assert found.item() == (1.0 if i == 1 else 0.0)
        if i != 1:
            applied += 1
            adamw_reference_step(ref_params, masters, exp_avgs, exp_avg_sqs, applied, lr, (0.9, 0.99), 1e-8, 0.1, scale)
    state = opt.state_dict()
    for j, (p, r) in enumerate(zip(params, ref_params)):
        assert p.dtype == dtype
        # Masters agree to fp32 rounding, so the casts agree up to one low-precision ulp.
        torch.testing.assert_close(p.detach(), r.detach(), atol=1e-6, rtol=TOL[dtype])
        torch.testing.assert_close(state[f"{j}.master"], masters[j], atol=1e-6, rtol=1e-5)
        torch.testing.assert_close(state[f"{j}.exp_avg_sq"], exp_avg_sqs[j], atol=1e-6, rtol=1e-5)
        assert state[f"{j}.step"].item() == applied
