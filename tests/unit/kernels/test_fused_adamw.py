import pytest
import torch
from safetensors.torch import load_file, save_file

from computeall.kernels import FusedAdamW, found_nonfinite

from .helpers import check_fused_adamw


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_matches_unfused_reference(dtype):
    check_fused_adamw("torch", dtype)


def test_parameters_become_views_of_one_flat_buffer_per_dtype():
    a, b = torch.randn(3, requires_grad=True), torch.randn(4, dtype=torch.bfloat16, requires_grad=True)
    c = torch.randn(2, 2, requires_grad=True)
    before = [x.detach().clone() for x in (a, b, c)]
    FusedAdamW([a, b, c])
    assert a.untyped_storage().data_ptr() == c.untyped_storage().data_ptr()
    assert b.untyped_storage().data_ptr() != a.untyped_storage().data_ptr()
    for x, y in zip((a, b, c), before):
        assert torch.equal(x.detach(), y)


def test_given_found_inf_skips_without_looking_at_grads():
    p = torch.randn(8, requires_grad=True)
    before = p.detach().clone()
    opt = FusedAdamW([p], lr=0.1)
    p.grad = torch.ones(8)
    opt.step(found_inf=torch.ones(()))  # e.g. another node overflowed
    assert torch.equal(p.detach(), before)
    assert opt.state_dict()["0.step"].item() == 0


def test_state_dict_round_trips_through_safetensors(tmp_path):
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2)).to(torch.bfloat16)
    opt = FusedAdamW(model.named_parameters(), lr=1e-2, weight_decay=0.01)
    for p in model.parameters():
        p.grad = torch.randn_like(p)
    opt.step()
    save_file(opt.state_dict(), tmp_path / "opt.safetensors")
    assert set(opt.state_dict()) >= {"0.weight.master", "0.weight.exp_avg", "0.weight.exp_avg_sq", "0.weight.step"}

    clone = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2)).to(torch.bfloat16)
    restored = FusedAdamW(clone.named_parameters(), lr=1e-2, weight_decay=0.01)
    restored.load_state_dict(load_file(tmp_path / "opt.safetensors"))
    for p, q in zip(model.parameters(), clone.parameters()):
        assert torch.equal(p.detach(), q.detach())
    grads = [torch.randn_like(p) for p in model.parameters()]
    for o, m in ((opt, model), (restored, clone)):
        for p, g in zip(m.parameters(), grads):
            p.grad = g
        o.step()
    for p, q in zip(model.parameters(), clone.parameters()):
        assert torch.equal(p.detach(), q.detach())


def test_found_nonfinite_is_a_device_tensor():
    flag = found_nonfinite([torch.ones(3), torch.tensor([0.0, float("nan")], dtype=torch.bfloat16)])
    assert isinstance(flag, torch.Tensor) and flag.dim() == 0 and flag.item() == 1.0
    assert found_nonfinite([torch.ones(3)]).item() == 0.0


def test_a_parameter_listed_twice_is_updated_once():
    p = torch.zeros(4, requires_grad=True)
    opt = FusedAdamW([p, p], lr=0.1)
    p.grad = torch.ones(4)
    opt.step()
    torch.testing.assert_close(p.detach(), torch.full((4,), -0.1))
