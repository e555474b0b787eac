"""The same correctness checks on a CUDA device, Triton kernels compiled for real (bf16 included)."""

import importlib.util

import pytest
import torch

from computeall.kernels import flash_attention, linear_cross_entropy

from .helpers import check_attention, check_fused_adamw, check_linear_cross_entropy

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
DTYPES = [torch.float32, torch.bfloat16, torch.float16]
needs_triton = pytest.mark.skipif(
    importlib.util.find_spec("triton") is None, reason="triton not installed (optional extra `kernels`)",
)


@needs_triton
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(2, 3, 37, 64), (1, 2, 300, 128), (1, 2, 1000, 32)], ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("causal", [True, False])
def test_flash_attention_triton_cuda(shape, dtype, causal):
    check_attention(lambda q, k, v, c: flash_attention(q, k, v, c, impl="triton"), *shape, dtype, causal, device="cuda")


@pytest.mark.parametrize("impl", ["tiled", "sdpa"])
def test_flash_attention_other_paths_cuda(impl):
    check_attention(lambda q, k, v, c: flash_attention(q, k, v, c, impl=impl), 1, 2, 130, 64, torch.bfloat16, True, device="cuda")


@needs_triton
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_linear_cross_entropy_triton_cuda(dtype, reduction):
    lce = lambda x, w, t, ii, red: linear_cross_entropy(x, w, t, ii, red, impl="triton")  # noqa: E731
    check_linear_cross_entropy(lce, 257, 64, 5000, dtype, reduction, device="cuda")


@pytest.mark.parametrize("impl", ["chunked", "builtin"])
def test_linear_cross_entropy_other_paths_cuda(impl):
    lce = lambda x, w, t, ii, red: linear_cross_entropy(x, w, t, ii, red, impl=impl)  # noqa: E731
    check_linear_cross_entropy(lce, 100, 64, 3000, torch.float32, "mean", device="cuda")


@pytest.mark.parametrize("impl", [pytest.param("triton", marks=needs_triton), "torch"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_fused_adamw_cuda(impl, dtype):
    check_fused_adamw(impl, dtype, device="cuda")
