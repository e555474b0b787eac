import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from computeall.kernels import flash_attention
from computeall.kernels.attention_tiled import flash_attention_tiled

from .helpers import check_attention

SHAPES = [(1, 2, 1, 32), (2, 2, 37, 64), (1, 3, 129, 128), (1, 1, 300, 48)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("causal", [True, False])
def test_tiled_matches_reference(shape, dtype, causal):
    # Small blocks so odd lengths exercise partial tiles and diagonal-crossing tiles.
    check_attention(lambda q, k, v, c: flash_attention_tiled(q, k, v, c, 32, 16), *shape, dtype, causal)


@pytest.mark.parametrize("impl", ["reference", "tiled", "sdpa"])
def test_dispatcher_impls(impl):
    check_attention(lambda q, k, v, c: flash_attention(q, k, v, c, impl=impl), 2, 2, 70, 64, torch.float32, True)


def test_tiled_skips_masked_tiles_and_never_builds_t_by_t():
    t, block_m, block_n = 256, 32, 64
    q, k, v = (torch.randn(1, 1, t, 32, requires_grad=True) for _ in range(3))
    score_tiles = []

    class Watch(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for x in out if isinstance(out, (tuple, list)) else (out,):
                assert not isinstance(x, torch.Tensor) or x.numel() < t * t, f"{func} built {tuple(x.shape)}"
            if func is torch.ops.aten.bmm.default:
                score_tiles.append(tuple(out.shape))
            return out

    with Watch():
        out = flash_attention_tiled(q, k, v, True, block_m, block_n)
        forward_tiles = len(score_tiles)
        out.sum().backward()
    # Query block ending at m1 visits key blocks up to m1 only: 1+1+2+2+3+3+4+4 of the 8*4 tiles.
    assert forward_tiles == 20


def test_rejects_bad_input():
    q = torch.randn(1, 2, 8, 32)
    with pytest.raises(ValueError):
        flash_attention(q, q, q, impl="nope")
    with pytest.raises(ValueError):
        flash_attention(q, q[:, :, :4], q, impl="sdpa")
