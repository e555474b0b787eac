"""Triton kernels run through the Triton interpreter on the CPU: small blocks over odd shapes, and the
sizes the GPU runs (64 x 64 attention blocks, a vocabulary past one 4096-wide block of the
cross-entropy's loop, an optimizer bucket of several 1024-wide blocks), in fp32, fp16 and bf16.

The interpreter is slow: one bf16 case of each production size runs by default (a few seconds);
the whole grid is marked `triton_grid` and runs with `pytest -m triton_grid` (about half a minute
on two cores). On a machine with CUDA the same kernels are compiled and tested for real in
test_cuda.py, and this module stays out of the way (the interpreter flag is process-wide).
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


DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def grid(cases: list, default) -> list:
    """Every case, all but `default` marked `triton_grid` (run with `-m triton_grid`)."""
    return [c if c == default else pytest.param(*(c if isinstance(c, tuple) else (c,)), marks=pytest.mark.triton_grid)
            for c in cases]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1, 2, 37, 32), (1, 1, 50, 64), (1, 1, 17, 128)], ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("causal", [True, False])
def test_flash_attention_triton(shape, dtype, causal):
    from computeall.kernels.attention_triton import flash_attention_triton

    check_attention(lambda q, k, v, c: flash_attention_triton(q, k, v, c, 16, 16), *shape, dtype, causal)


@pytest.mark.parametrize("dtype, shape, causal", grid(
    [(d, s, c) for d in DTYPES for s in [(1, 2, 130, 64), (1, 1, 200, 128), (1, 2, 150, 32)] for c in (True, False)],
    default=(torch.bfloat16, (1, 2, 130, 64), True)))
def test_flash_attention_triton_production_blocks(dtype, shape, causal):
    """The GPU's 64 x 64 blocks (the kernel's defaults): several query and key blocks, a partial last
    one, the diagonal crossing blocks."""
    from computeall.kernels.attention_triton import flash_attention_triton

    check_attention(flash_attention_triton, *shape, dtype, causal)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_linear_cross_entropy_triton(dtype, reduction):
    from computeall.kernels.lce_triton import linear_cross_entropy_triton

    check_linear_cross_entropy(linear_cross_entropy_triton, 13, 32, 300, dtype, reduction)


@pytest.mark.parametrize("dtype, reduction", grid([(d, r) for d in DTYPES for r in ("mean", "sum")],
                                                  default=(torch.bfloat16, "mean")))
def test_linear_cross_entropy_triton_past_one_vocabulary_block(dtype, reduction):
    """A vocabulary of 5000 takes two passes of the kernel's 4096-wide block, the second partial."""
    from computeall.kernels.lce_triton import BLOCK_V, linear_cross_entropy_triton

    assert 5000 > BLOCK_V
    check_linear_cross_entropy(linear_cross_entropy_triton, 13, 32, 5000, dtype, reduction)


@pytest.mark.parametrize("dtype", DTYPES)
def test_fused_adamw_triton(dtype):
    check_fused_adamw("triton", dtype)


@pytest.mark.parametrize("dtype", grid(DTYPES, default=torch.bfloat16))
def test_fused_adamw_triton_over_several_blocks(dtype):
    from computeall.kernels.adamw_triton import BLOCK

    shapes = ((BLOCK + 3,), (2, BLOCK), (17, 5))  # 3 * BLOCK + 88 elements: four programs, the last partial
    check_fused_adamw("triton", dtype, shapes=shapes)
