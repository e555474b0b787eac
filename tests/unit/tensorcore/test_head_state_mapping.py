"""The fused <-> per-head state mapping: exact round trips for weights, fp32 masters and Adam state."""

import pytest
import torch

from computeall.kernels import FusedAdamW
from computeall.network import Graph, load_network
from computeall.network.head_fusion import fuse_heads, head_groups
from computeall.network.per_head import per_head_gpt
from computeall.tensorcore.head_state_mapping import (
    StateMappingError,
    convert_state,
    group_by_vnode,
    source_vnodes,
    vnode_state,
    to_fused,
    to_unfused,
)
from computeall.tensorcore.ops import build_vnode
from computeall.tensorcore.ops.fused_heads import qkv_from_heads, qkv_to_heads
from computeall.tensorcore.vnode_runtime import VNodeRuntime

H, HD, DIM = 4, 8, 32


@pytest.fixture(scope="module")
def specs():
    unfused = load_network(per_head_gpt(heads=H, blocks=2, dim=DIM, context=16, vocab=64))
    return unfused, fuse_heads(unfused)[0]


def random_state(spec, suffixes=("", ".master", ".exp_avg", ".exp_avg_sq"), ns="") -> dict[str, torch.Tensor]:
    """Every parameter of `spec` with random values, under each suffix, plus a 0-dim `.step` per parameter."""
    g = torch.Generator().manual_seed(3)
    runtime = VNodeRuntime(Graph(spec), Graph(spec).order, 0, torch.device("cpu"))
    out = {}
    for name, p in runtime.parameters().items():
        for s in suffixes:
            out[f"{ns}{name}{s}"] = torch.randn(p.shape, generator=g)
        out[f"{ns}{name}.step"] = torch.tensor(7.0)
    return out


def test_qkv_layout_is_per_head_rows_in_head_order():
    heads = [torch.randn(3 * HD, DIM) for _ in range(H)]
    fused = qkv_from_heads(heads)
    assert fused.shape == (3 * H * HD, DIM)
    for h in range(H):
        q, k, v = heads[h].chunk(3)
        assert torch.equal(fused[h * HD:(h + 1) * HD], q)
        assert torch.equal(fused[H * HD + h * HD:H * HD + (h + 1) * HD], k)
        assert torch.equal(fused[2 * H * HD + h * HD:2 * H * HD + (h + 1) * HD], v)
    assert all(torch.equal(a, b) for a, b in zip(qkv_to_heads(fused, H), heads))


def test_round_trip_is_exact_both_ways(specs):
    unfused, fused = specs
    groups = head_groups(fused)
    state = random_state(unfused, ns="optim/") | random_state(unfused, suffixes=("",), ns="param/")
    there = to_fused(state, groups)
    assert sorted(there) == sorted(random_state(fused, ns="optim/") | random_state(fused, suffixes=("",), ns="param/"))
    assert there["optim/b1.attn.qkv.weight.step"].item() == 7.0
    back = to_unfused(there, groups)
    assert sorted(back) == sorted(state) and all(torch.equal(back[k], state[k]) for k in state)
    # and starting from the fused form
    fstate = random_state(fused)
    again = to_fused(to_unfused(fstate, groups), groups)
    assert sorted(again) == sorted(fstate) and all(torch.equal(again[k], fstate[k]) for k in fstate)


def test_convert_state_picks_the_direction_from_the_target(specs):
    unfused, fused = specs
    state = random_state(unfused)
    as_fused = convert_state(state, fused)
    assert "b0.attn.qkv.weight" in as_fused and "b0.h0.qkv.weight" not in as_fused
    assert convert_state(as_fused, fused) is as_fused  # already in the target form: untouched
    assert all(torch.equal(convert_state(as_fused, unfused)[k], state[k]) for k in state)
    assert convert_state(state, unfused) is state


def test_mapping_matches_real_optimizer_state_with_fp32_masters(specs):
    """bf16 weights with fp32 masters: the fused optimizer's state equals the mapped per-head state."""
    unfused, fused = specs
    states = []
    for spec in (unfused, fused):
        spec = spec.model_copy(deep=True)
        for v in spec.vnodes:
            v.precision = "bf16"
        rt = VNodeRuntime(Graph(spec), Graph(spec).order, 5, torch.device("cpu"))
        params = rt.parameters()
        opt = FusedAdamW(sorted(params.items()), lr=1e-2, impl="torch")
        for p in params.values():  # the same gradient in both forms: a function of the weight only
            p.grad = (p.detach().float() * 3 + 1).to(p.dtype)
        opt.step()
        states.append({f"param/{n}": p.detach().clone() for n, p in params.items()}
                      | {f"optim/{k}": v for k, v in opt.state_dict().items()})
    mapped = to_fused(states[0], head_groups(fused))
    assert sorted(mapped) == sorted(states[1])
    assert states[1]["optim/b0.attn.qkv.weight.master"].dtype == torch.float32
    for k in mapped:
        assert torch.equal(mapped[k], states[1][k]), k


def test_fused_init_is_the_per_head_init(specs):
    unfused, fused = specs
    heads = [build_vnode(unfused.vnode(f"b1.h{h}"), 9, torch.device("cpu")) for h in range(H)]
    concat = build_vnode(unfused.vnode("b1.attn"), 9, torch.device("cpu"))
    one = build_vnode(fused.vnode("b1.attn"), 9, torch.device("cpu"))
    assert torch.equal(one.qkv.weight, qkv_from_heads([m.qkv.weight for m in heads]))
    assert torch.equal(one.proj.weight, concat.proj.weight)


def test_errors_say_what_is_wrong(specs):
    unfused, fused = specs
    groups = head_groups(fused)
    state = random_state(unfused)
    del state["b0.h2.qkv.weight.exp_avg"]
    with pytest.raises(StateMappingError, match="different entries"):
        to_fused(state, groups)
    state = {k: v for k, v in random_state(unfused).items() if not k.startswith("b0.h3.")}
    with pytest.raises(StateMappingError, match="nothing for head b0.h3"):
        to_fused(state, groups)
    state = random_state(unfused)
    state["b0.h1.qkv.weight.step"] = torch.tensor(6.0)
    with pytest.raises(StateMappingError, match="values differ"):
        to_fused(state, groups)
    mixed = random_state(unfused) | {"b0.attn.qkv.weight": torch.zeros(3 * H * HD, DIM)}
    with pytest.raises(StateMappingError, match="mixes the fused and the unfused form"):
        to_fused(mixed, groups)


def test_checkpoint_objects_per_vnode(specs):
    unfused, fused = specs
    assert source_vnodes(fused, "b0.attn") == ["b0.attn"] + [f"b0.h{h}" for h in range(H)]
    assert source_vnodes(unfused, "b0.h2") == ["b0.h2", "b0.attn"]
    assert source_vnodes(unfused, "b0.mlp") == ["b0.mlp"]
    objects = group_by_vnode(to_fused(random_state(unfused, ns="param/"), head_groups(fused)), fused)
    assert set(objects) == {v.id for v in fused.vnodes if v.op not in ("add", "tied_lm_head_ce")}
    assert sorted(objects["b0.attn"]) == sorted(
        f"param/b0.attn.{p}{s}" for p in ("qkv.weight", "proj.weight")
        for s in ("", ".master", ".exp_avg", ".exp_avg_sq", ".step"))


def test_vnode_state_from_objects_of_either_topology(specs):
    """What a PNode does on load: fetch the objects `source_vnodes` names, take its VNode's state."""
    unfused, fused = specs
    ustate = random_state(unfused, ns="optim/") | random_state(unfused, suffixes=("",), ns="param/")
    fstate = to_fused(ustate, head_groups(fused))
    for saved_spec, saved, target_spec, target in ((unfused, ustate, fused, fstate), (fused, fstate, unfused, ustate),
                                                   (fused, fstate, fused, fstate), (unfused, ustate, unfused, ustate)):
        objects = group_by_vnode(saved, saved_spec)
        want = group_by_vnode(target, target_spec)
        for vid in want:
            got = vnode_state({s: objects[s] for s in source_vnodes(target_spec, vid) if s in objects}, target_spec, vid)
            assert sorted(got) == sorted(want[vid]), vid
            assert all(torch.equal(got[k], want[vid][k]) for k in got), vid
