"""AdamW8bit: the master split exactly, the update against its whole-tensor reference bit for bit
(across chunks), and the state's round trip."""

import pytest
import torch

from computeall.kernels.adamw_8bit import (
    CHUNK, AdamW8bit, adamw_8bit_reference, fp32_state, join_master, split_master, stochastic_bf16,
)
from computeall.kernels.blockwise_8bit import BLOCK, quantize

HYPER = dict(lr=1e-2, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)


def test_a_master_is_its_bf16_weight_and_low_half_exactly():
    g = torch.Generator().manual_seed(0)
    master = torch.cat([torch.randn(100000, generator=g) * torch.logspace(-30, 30, 100000),
                        torch.tensor([0.0, -0.0, 1.0, -1.0, 3.0e38, -3.0e38, 1e-40, -1e-40])])
    high, low = split_master(master)
    assert high.dtype == torch.bfloat16 and low.dtype == torch.int16
    assert torch.equal(join_master(high, low).view(torch.int32), master.view(torch.int32))
    # the weight is the master rounded to nearest: torch's own rounding but on exact ties
    ties = (master.view(torch.int32) & 0xFFFF) == 0x8000
    assert torch.equal(high[~ties], master[~ties].to(torch.bfloat16))
    assert ((high.float() - master).abs() <= (master.to(torch.bfloat16).float() - master).abs() * 1.0001 + 1e-45).all()


def _pair(dtype: torch.dtype, n: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    values = torch.randn(n, generator=g) * 0.02
    p = torch.nn.Parameter(values.to(dtype))
    reference = {"master": p.detach().float().clone(), "exp_avg": quantize(torch.zeros(n), True),
                 "exp_avg_sq": quantize(torch.zeros(n), False)}
    return p, torch.nn.Parameter(p.detach().clone()), reference


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, torch.float16])
def test_the_chunked_update_is_the_whole_tensor_reference_bit_for_bit(dtype):
    n = CHUNK + 3 * BLOCK + 77  # over a chunk boundary, and a short last block
    p, q, reference = _pair(dtype, n)
    opt = AdamW8bit([("p", p)], **HYPER)
    g = torch.Generator().manual_seed(1)
    for step in range(1, 4):
        grad = (torch.randn(n, generator=g) * torch.logspace(-6, 0, n)).to(dtype)
        p.grad = grad * 8
        opt.step(grad_scale=8.0)  # a power of two: divided out exactly
        adamw_8bit_reference(q.data, grad, reference, step, **HYPER)
        assert torch.equal(p.detach(), q.detach()), f"step {step}"
        state = opt.state_dict()
        for key in ("exp_avg", "exp_avg_sq"):
            assert torch.equal(state[f"p.{key}.codes"], reference[key][0])
            assert torch.equal(state[f"p.{key}.scale"], reference[key][1])
        assert torch.equal(opt.states["p"].read_master(), reference["master"])


def test_what_a_bf16_parameter_holds_besides_weight_and_gradient():
    n = 10 * BLOCK
    p = torch.nn.Parameter(torch.zeros(n, dtype=torch.bfloat16))
    held = AdamW8bit([("p", p)]).state_bytes()
    assert held["master"] == 2 * n  # the low half
    assert held["optimizer"] == 2 * n + 2 * 10 * 4 + 4  # two moments of a byte, a scale per block each, the step


def test_the_state_round_trips_and_an_fp32_state_loads():
    n = 3 * BLOCK + 5
    p, _, _ = _pair(torch.bfloat16, n)
    opt = AdamW8bit([("p", p)], **HYPER)
    for s in range(3):
        p.grad = torch.randn(n, generator=torch.Generator().manual_seed(s)).to(torch.bfloat16)
        opt.step()
    saved, weight = opt.state_dict(), p.detach().clone()
    assert saved["p.master_low"].shape == p.shape and saved["p.step"].item() == 3

    def resumed(state):
        r = torch.nn.Parameter(weight.clone())
        other = AdamW8bit([("p", r)], **HYPER)
        other.load_state_dict(state)
        r.grad = torch.ones(n, dtype=torch.bfloat16)
        other.step()
        return r.detach()

    p.grad = torch.ones(n, dtype=torch.bfloat16)
    opt.step()
    assert torch.equal(resumed(saved), p.detach())
    # the same state in fp32 form (what the fp32 optimizer keeps) loads into the same bits
    assert torch.equal(resumed(fp32_state(saved, {"p": weight})), p.detach())
    # a state saved in blocks of another size is refused, never read as if its scales were this version's
    coarser = {**saved, "p.exp_avg.scale": saved["p.exp_avg.scale"][:2].clone()}
    with pytest.raises(ValueError, match=r"saved in 2 blocks, this version keeps 4 \(blocks of 256 elements\)"):
        resumed(coarser)


# -- a bf16 weight without a master: stochastic rounding ---------------------------------------
def test_stochastic_rounding_lands_on_a_neighbour_with_the_odds_of_the_fraction():
    g = torch.Generator().manual_seed(0)
    down = (torch.randn(200000, generator=g) * 0.02).to(torch.bfloat16)  # exact bf16 values
    for odds in (0.25, 0.75):
        x = down.float() + torch.sign(down.float()) * odds * _spacing(down)
        rounded = stochastic_bf16(x, step=3).float()
        up = down.float() + torch.sign(down.float()) * _spacing(down)
        assert ((rounded == down.float()) | (rounded == up)).all(), "not one of the two neighbours"
        assert abs((rounded == up).float().mean().item() - odds) < 0.01


def _spacing(w: torch.Tensor) -> torch.Tensor:
    """The distance from each bf16 value to the next one away from zero."""
    bits = w.view(torch.int16)
    return ((bits + 1).view(torch.bfloat16).float() - w.float()).abs()


def test_stochastic_rounding_depends_on_the_element_and_step_only():
    x = torch.randn(50000, generator=torch.Generator().manual_seed(1))
    whole = stochastic_bf16(x, step=5)
    perm = torch.randperm(x.numel(), generator=torch.Generator().manual_seed(2))
    assert torch.equal(stochastic_bf16(x[perm], step=5).view(torch.int16), whole[perm].view(torch.int16))
    assert torch.equal(torch.cat([stochastic_bf16(x[:777], 5), stochastic_bf16(x[777:], 5)]).view(torch.int16),
                       whole.view(torch.int16))
    assert not torch.equal(stochastic_bf16(x, step=6).view(torch.int16), whole.view(torch.int16))


def test_a_weight_without_master_updates_the_same_bits_whole_or_split_into_shards():
    """As a vocabulary split into row shards (or heads into per-head VNodes) must: every element is
    updated from its own values only, the rounding's dither included; and no master is held."""
    rows, cols = 3 * 64, 96  # shards of whole blocks (24 of 256 elements), as a vocabulary shard of whole rows is
    g = torch.Generator().manual_seed(3)
    weight = (torch.randn(rows, cols, generator=g) * 0.02).to(torch.bfloat16)
    whole = torch.nn.Parameter(weight.clone())
    shards = [torch.nn.Parameter(part.clone()) for part in weight.split(64)]
    one = AdamW8bit([("w", whole)], **HYPER, stochastic_rounding=True)
    split = AdamW8bit([(f"s{i}", p) for i, p in enumerate(shards)], **HYPER, stochastic_rounding=True)
    assert one.state_bytes()["master"] == 0
    before = whole.detach().clone()
    for step in range(3):
        grad = (torch.randn(rows, cols, generator=g) * 1e-3).to(torch.bfloat16)
        whole.grad = grad
        for p, part in zip(shards, grad.split(64)):
            p.grad = part.clone()
        one.step()
        split.step()
        assert torch.equal(torch.cat([p.detach() for p in shards]).view(torch.int16), whole.detach().view(torch.int16))
    assert not torch.equal(before, whole.detach())
    # updates far below a bf16 spacing (2**-7 to 2**-6 here) still move the weights on average, where
    # rounding to nearest would leave every one where it was
    start = (1 + 2 * torch.rand(20000, generator=g)).to(torch.bfloat16).float()
    tiny = torch.nn.Parameter(start.to(torch.bfloat16))
    opt = AdamW8bit([("t", tiny)], lr=1e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.0, stochastic_rounding=True)
    for _ in range(20):
        tiny.grad = torch.ones_like(tiny)
        opt.step()
    moved = (tiny.detach().float() - start).mean().item()
    assert abs(moved + 20 * 1e-4) < 2e-4, moved


def test_a_weight_without_master_resumes_from_its_state_bit_for_bit():
    n = 3 * BLOCK + 5
    p, _, _ = _pair(torch.bfloat16, n)
    opt = AdamW8bit([("p", p)], **HYPER, stochastic_rounding=True)
    for s in range(3):
        p.grad = torch.randn(n, generator=torch.Generator().manual_seed(s)).to(torch.bfloat16)
        opt.step()
    saved, weight = opt.state_dict(), p.detach().clone()
    assert not any(key.endswith(("master", "master_low")) for key in saved)
    r = torch.nn.Parameter(weight.clone())
    resumed = AdamW8bit([("p", r)], **HYPER, stochastic_rounding=True)
    resumed.load_state_dict(saved)
    p.grad, r.grad = torch.ones(n, dtype=torch.bfloat16), torch.ones(n, dtype=torch.bfloat16)
    opt.step()
    resumed.step()
    assert torch.equal(r.detach().view(torch.int16), p.detach().view(torch.int16))
