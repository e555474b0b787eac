"""8-bit blockwise quantization against torchao's, the library's own functions: the same bytes."""

import pytest
import torch

from computeall.kernels.blockwise_8bit import BLOCK, dequantize, dynamic_map, nearest_reference, quantize

quant_utils = pytest.importorskip("torchao.optim.quant_utils", reason="torchao is a dev dependency (pyproject)")


def moments(n: int, signed: bool, seed: int = 0) -> torch.Tensor:
    """Values over nine decades, with zeros and a block of nothing but zeros: what Adam's moments hold."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, generator=g) * torch.logspace(-9, 0, n)[torch.randperm(n, generator=g)]
    x[::97] = 0
    x[:BLOCK] = 0
    return x if signed else x * x


@pytest.mark.parametrize("signed", [True, False])
def test_the_map_is_the_librarys(signed):
    assert torch.equal(dynamic_map(signed), torch.tensor(quant_utils.create_dynamic_map(signed)))


@pytest.mark.parametrize("signed", [True, False])
def test_codes_scales_and_values_are_torchaos_at_its_block_of_256(signed):
    x = moments(BLOCK * 40, signed)
    codes, scale = quantize(x, signed)
    scaled, their_scale = quant_utils.scale_tensor(x, BLOCK)
    qmap = dynamic_map(signed)
    their_codes = quant_utils.quantize_8bit_with_qmap(scaled, qmap)
    assert torch.equal(scale, their_scale)
    assert torch.equal(codes, their_codes)
    assert torch.equal(dequantize(codes, scale, signed), quant_utils.dequant_with_qmap(their_codes, qmap, their_scale))


@pytest.mark.parametrize("signed", [True, False])
def test_a_shorter_last_block_is_scaled_on_its_own(signed):
    x = moments(BLOCK * 3 + 100, signed, seed=1)
    codes, scale = quantize(x, signed)
    tail_codes, tail_scale = quantize(x[-100:].clone(), signed)
    assert scale.shape == (4,) and torch.equal(scale[-1:], tail_scale) and torch.equal(codes[-100:], tail_codes)
    assert torch.equal(quantize(x[: BLOCK * 3].clone(), signed)[0], codes[: BLOCK * 3])


@pytest.mark.parametrize("signed", [True, False])
def test_the_table_agrees_with_the_search_on_every_decision_point(signed):
    """Around every point where the nearest value changes (the fp32s on and next to each midpoint),
    and on the values themselves, the table lookup picks what the plain search does."""
    code = dynamic_map(signed)
    mid = (code[1:] + code[:-1]) / 2
    y = torch.cat([mid, torch.nextafter(mid, torch.tensor(2.0)), torch.nextafter(mid, torch.tensor(-2.0)), code,
                   torch.rand(20000, generator=torch.Generator().manual_seed(2)) * 2 - 1])
    y = y.clamp(-1, 1) if signed else y.abs().clamp(max=1)
    for part in y.split(BLOCK - 1):
        block = torch.cat([part, torch.ones(1)])  # its scale is 1: the block's values are the y themselves
        assert torch.equal(quantize(block, signed)[0].long(), nearest_reference(block, signed))


def test_quantization_is_blockwise_whatever_the_chunks():
    x = moments(BLOCK * 6, True, seed=3)
    whole = quantize(x, True)
    parts = [quantize(x[i: i + 2 * BLOCK].clone(), True) for i in range(0, x.numel(), 2 * BLOCK)]
    assert torch.equal(whole[0], torch.cat([c for c, _ in parts])) and torch.equal(whole[1], torch.cat([s for _, s in parts]))


@pytest.mark.parametrize("signed", [True, False])
def test_on_and_beside_every_midpoint_the_codes_are_torchaos(signed):
    """Where two values are equally near (and one fp32 either side), the rule decides: torchao's."""
    code = dynamic_map(signed)
    mid = (code[1:] + code[:-1]) / 2
    y = torch.cat([mid, torch.nextafter(mid, torch.tensor(2.0)), torch.nextafter(mid, torch.tensor(-2.0))])
    y = y.clamp(-1, 1) if signed else y.abs().clamp(max=1)
    for part in y.split(BLOCK - 1):
        block = torch.cat([part, torch.ones(1)])  # its scale is 1
        assert torch.equal(quantize(block, signed)[0], quant_utils.quantize_8bit_with_qmap(block, code))
