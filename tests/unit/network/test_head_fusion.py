"""The head-fusion rewrite: the exact per-head pattern becomes one fused VNode; anything else stays, saying why."""

from pathlib import Path

import pytest

from computeall.network import Graph, NetworkError, load_network, load_network_file
from computeall.network.head_fusion import find_head_groups, fuse_heads, head_groups
from computeall.network.loader import validate

from computeall.network.per_head import per_head_gpt

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "networks"


def head(h: int, **extra) -> str:
    fields = ", ".join(f"{k}: {v}" for k, v in {"head": h, **extra}.items())
    return f'        - {{id: "b{{i}}.h{h}", op: attention_head, {fields}, inputs: ["b{{i}}.norm1"]}}'


def concat(ids: list[int], **extra) -> str:
    names = ", ".join(f'"b{{i}}.h{h}"' for h in ids)
    fields = "".join(f", {k}: {v}" for k, v in extra.items())
    return f'        - {{id: "b{{i}}.attn", op: concat_heads, inputs: [{names}]{fields}}}'


def block(*lines: str) -> str:
    return "\n".join(lines)


def rewrite(text: str):
    spec = load_network(text)
    fused, lines = fuse_heads(spec)
    assert not validate(fused), validate(fused)
    return spec, fused, lines


def test_tiny_gpt_heads_fuses_every_block_and_keeps_ids_and_parameters():
    spec = load_network_file(EXAMPLES / "tiny-gpt-heads.yaml")
    before = spec.model_dump()
    fused, lines = fuse_heads(spec)
    assert spec.model_dump() == before, "the rewrite must not modify its input"
    assert not validate(fused)
    assert len(lines) == 4 and all(line.startswith(f"fused b{i}.h0..b{i}.h7 (8 heads of 32) into b{i}.attn")
                                   for i, line in enumerate(lines))
    attn = fused.vnode("b2.attn")
    assert attn.op == "fused_attention_heads" and attn.inputs == ["b2.norm1"]
    assert attn.params == {"dim": 256, "heads": 8, "head_dim": 32, "rope_base": 10000.0,
                           "head_ids": [f"b2.h{h}" for h in range(8)]}
    assert not any(v.op in ("attention_head", "concat_heads") for v in fused.vnodes)
    assert len(fused.vnodes) == len(spec.vnodes) - 4 * 8
    # downstream VNodes read the same name; parameter count unchanged
    assert fused.vnode("b2.res1").inputs == ["b1.res2", "b2.attn"]
    g0, g1 = Graph(spec), Graph(fused)
    assert sum(map(g0.param_count, g0.order)) == sum(map(g1.param_count, g1.order))
    # fusing twice changes nothing and says nothing
    again, more = fuse_heads(fused)
    assert again == fused and more == []
    # the fused network still names its heads, so state can be mapped either way
    assert [g.head_ids for g in head_groups(fused)] == [g.head_ids for g in find_head_groups(spec)[0]]


def test_network_without_heads_is_untouched():
    spec = load_network_file(EXAMPLES / "micro-gpt.yaml")
    fused, lines = fuse_heads(spec)
    assert fused == spec and lines == []


def test_missing_head_is_left_unfused_with_reason():
    text = per_head_gpt(blocks=1, block_heads=block(head(0), head(1), head(3), concat([0, 1, 3], heads=3)))
    spec, fused, lines = rewrite(text)
    assert fused == spec
    assert lines == ["left b0.attn unfused: head indices [0, 1, 3] are not 0..2 in order (head 2 missing)"]


def test_heads_out_of_order_are_left_unfused():
    text = per_head_gpt(blocks=1, block_heads=block(*(head(h) for h in range(4)), concat([1, 0, 2, 3])))
    spec, fused, lines = rewrite(text)
    assert fused == spec and "head indices [1, 0, 2, 3] are not 0..3 in order" in lines[0]


def test_different_head_dims_are_left_unfused_and_still_train():
    text = per_head_gpt(blocks=1, block_heads=block(
        head(0), head(1), head(2, head_dim=32), head(3), concat([0, 1, 2, 3], head_dim="[16, 16, 32, 16]")
    ))
    spec, fused, lines = rewrite(text)
    assert fused == spec
    assert lines == ["left b0.attn unfused: the heads have different head dims "
                     "{'b0.h0': 16, 'b0.h1': 16, 'b0.h2': 32, 'b0.h3': 16}"]
    assert Graph(spec).param_count("b0.attn") == 80 * 64


def test_heads_feeding_two_consumers_are_left_unfused():
    other = '        - {id: "b{i}.other", op: concat_heads, inputs: ["b{i}.h0", "b{i}.h1"], heads: 2}'
    res = '        - {id: "b{i}.mix", op: add, inputs: ["b{i}.attn", "b{i}.other"]}'
    text = per_head_gpt(blocks=1, block_heads=block(*(head(h) for h in range(4)), concat([0, 1, 2, 3]), other, res))
    text = text.replace('inputs: ["{in}", "b{i}.attn"]', 'inputs: ["{in}", "b{i}.mix"]')
    spec, fused, lines = rewrite(text)
    assert fused == spec
    assert "left b0.attn unfused: head b0.h0 also feeds b0.other; fused, it would have no output of its own" in lines
    assert "left b0.other unfused: head b0.h0 also feeds b0.attn; fused, it would have no output of its own" in lines


def test_heads_reading_different_inputs_are_left_unfused():
    odd = '        - {id: "b{i}.h3", op: attention_head, head: 3, inputs: ["{in}"]}'
    text = per_head_gpt(blocks=1, block_heads=block(head(0), head(1), head(2), odd, concat([0, 1, 2, 3])))
    spec, fused, lines = rewrite(text)
    assert fused == spec and "the heads read different inputs" in lines[0]


def test_mixed_precision_group_is_left_unfused():
    text = per_head_gpt(blocks=1, block_heads=block(head(0), head(1, precision="bf16"), concat([0, 1], heads=2)))
    text = text.replace("head_dim: 16", "head_dim: 32")
    spec, fused, lines = rewrite(text)
    assert fused == spec and "differ in precision" in lines[0]


def test_heads_that_compress_their_outputs_are_left_unfused():
    # fused, the head -> concat edges (and their int8 rounding) would vanish: the math would change
    text = per_head_gpt(blocks=1, block_heads=block(head(0), head(1, wire="int8"), concat([0, 1], heads=2)))
    text = text.replace("head_dim: 16", "head_dim: 32")
    spec, fused, lines = rewrite(text)
    assert fused == spec and "compress their outputs on the wire {'b0.h1': 'int8'}" in lines[0]


def test_a_compressing_concat_fuses_and_its_wire_goes_to_the_fused_vnode():
    text = per_head_gpt(blocks=1, block_heads=block(head(0), head(1), concat([0, 1], heads=2, wire="bf16")))
    text = text.replace("head_dim: 16", "head_dim: 32")
    _, fused, _ = rewrite(text)
    assert Graph(fused).wire("b0.attn") == "bf16" and fused.vnode("b0.attn").op == "fused_attention_heads"


def test_only_the_matching_block_is_fused():
    good = per_head_gpt(blocks=1)
    # a second block written by hand with a missing head
    extra = """  - {id: c.norm1, op: rmsnorm, inputs: [b0.res2]}
  - {id: c.h0, op: attention_head, head: 0, inputs: [c.norm1]}
  - {id: c.h2, op: attention_head, head: 2, inputs: [c.norm1]}
  - {id: c.attn, op: concat_heads, inputs: [c.h0, c.h2], heads: 2}
  - {id: c.res, op: add, inputs: [b0.res2, c.attn]}
  - {id: stray, op: attention_head, head: 0, inputs: [c.res]}
"""
    text = good.replace("  - {id: norm_f, op: rmsnorm, inputs: [b0.res2]}", extra + "  - {id: norm_f, op: rmsnorm, inputs: [c.res]}")
    spec, fused, lines = rewrite(text)
    assert fused.vnode("b0.attn").op == "fused_attention_heads"
    assert fused.vnode("c.attn").op == "concat_heads" and fused.vnode("c.h2").op == "attention_head"
    assert lines == [
        "fused b0.h0..b0.h3 (4 heads of 16) into b0.attn: one fused_attention_heads VNode reading b0.norm1",
        "left c.attn unfused: head indices [0, 2] are not 0..1 in order (head 1 missing)",
        "left stray unfused: no concat_heads VNode gathers it",
    ]


def problems(text: str) -> list[str]:
    with pytest.raises(NetworkError) as info:
        load_network(text)
    return info.value.problems


def test_validation_of_the_new_ops_names_vnode_and_field():
    wrong_count = per_head_gpt(blocks=1, block_heads=block(head(0), head(1), concat([0, 1])))  # declares 4 heads
    assert any("vnode 'b0.attn', field 'inputs': op concat_heads takes 4 input(s), got 2" in p for p in problems(wrong_count))
    odd = per_head_gpt(blocks=1, block_heads=block(head(0, head_dim=15), concat([0], heads=1, head_dim=15)))
    assert any("vnode 'b0.h0', field 'head_dim'" in p and "even" in p for p in problems(odd))
    width = per_head_gpt(blocks=1, block_heads=block(head(0), head(1), concat([0, 1], heads=2, head_dim=32)))
    assert any("vnode 'b0.attn', field 'head_dim': expects 32 features but 'b0.h0' gives 16" in p for p in problems(width))
    twice = per_head_gpt(blocks=1, block_heads=block(head(0), concat([0, 0], heads=2)))
    assert any("vnode 'b0.attn', field 'inputs': a head is listed twice" in p for p in problems(twice))


def test_a_fused_vnode_may_be_written_directly():
    text = per_head_gpt(blocks=1, block_heads='        - {id: "b{i}.attn", op: fused_attention_heads, inputs: ["b{i}.norm1"]}')
    spec = load_network(text)
    assert spec.vnode("b0.attn").params == {"dim": 64, "heads": 4, "head_dim": 16}  # from the defaults
    assert head_groups(spec) == []  # it names no heads: nothing to map
    assert Graph(spec).param_count("b0.attn") == 4 * 64 * 64
