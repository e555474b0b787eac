"""Triton kernels run through the Triton interpreter on the CPU, with small shapes.

On a machine with CUDA the same kernels are compiled and tested for real in test_cuda.py,
and this module stays out of the way (the interpreter flag is process-wide).
"""

import pytest
import torch

import declared

if torch.cuda.is_available():
    pytest.skip("CUDA present: Triton kernels are tested compiled in test_cuda.py", allow_module_level=True)
declared.present("triton")  # found, not imported: Triton must first load under the flag

from .helpers import check_attention, check_fused_adamw, check_linear_cross_entropy  # noqa: E402
from .triton_interpreter import triton_interpreter  # noqa: E402


@pytest.fixture(autouse=True, scope="module")
def _interpreted():
    """The flag holds for this module's tests only: PNodes started by later tests must not inherit it."""
    with triton_interpreter():
        yield


# The interpreter's tl.dot mishandles bf16 (numpy has no bf16), so bf16 is covered on CUDA only.
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("shape", [(1, 2, 37, 32), (1, 1, 50, 64), (1, 1, 17, 128)], ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("causal", [True, False])
def test_flash_attention_triton(shape, dtype, causal):
    from computeall.kernels.attention_triton import flash_attention_triton

    check_attention(lambda q, k, v, c: flash_attention_triton(q, k, v, c, 16, 16), *shape, dtype, causal)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_linear_cross_entropy_triton(dtype, reduction):
    from computeall.kernels.lce_triton import linear_cross_entropy_triton

    check_linear_cross_entropy(linear_cross_entropy_triton, 13, 32, 300, dtype, reduction)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_fused_adamw_triton(dtype):
    check_fused_adamw("triton", dtype)
