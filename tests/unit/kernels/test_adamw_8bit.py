"""AdamW8bit: the master split exactly, the update against its whole-tensor reference bit for bit
(across chunks), and the state's round trip."""

import pytest
import torch

from computeall.kernels.adamw_8bit import CHUNK, AdamW8bit, adamw_8bit_reference, fp32_state, join_master, split_master
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
