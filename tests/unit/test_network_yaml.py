"""Network YAML: macros expand, defaults merge, and every mistake names the VNode and field."""

from pathlib import Path

import pytest

from computeall.network import Graph, NetworkError, init_seed, load_network, load_network_file

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "networks"

HEADER = "name: t\nvocab_size: 64\ncontext: 8\ndefaults: {dim: 16, heads: 2, hidden: 32}\nvnodes:\n"
EMBED = "  - {id: embed, op: embedding, inputs: [data.tokens]}\n"
HEAD = "  - {id: head, op: tied_lm_head_ce, inputs: [%s, data.targets], tie: embed}\n"


def problems(text: str) -> list[str]:
    with pytest.raises(NetworkError) as info:
        load_network(text)
    return info.value.problems


def test_tiny_gpt_expands_repeat_and_merges_defaults():
    spec = load_network_file(EXAMPLES / "tiny-gpt.yaml")
    ids = [v.id for v in spec.vnodes]
    assert ids[:3] == ["embed", "b0.norm1", "b0.attn"]
    assert "b3.res2" in ids and len(ids) == 1 + 4 * 6 + 2
    attn = spec.vnode("b2.attn")
    assert attn.params == {"dim": 256, "heads": 8} and attn.precision == "fp32"
    # the first block reads the embedding, later blocks read the previous block's output
    assert spec.vnode("b0.res1").inputs == ["embed", "b0.attn"]
    assert spec.vnode("b1.norm1").inputs == ["b0.res2"]


def test_topological_order_and_tie_groups():
    graph = Graph(load_network_file(EXAMPLES / "micro-gpt.yaml"))
    position = {v: i for i, v in enumerate(graph.order)}
    for edge in graph.edges:
        if edge.src in position:
            assert position[edge.src] < position[edge.dst]
    assert graph.tie_groups() == [{"embed", "head"}]


def test_unknown_op_names_vnode_and_field():
    found = problems(HEADER + EMBED + "  - {id: x, op: conv9, inputs: [embed]}\n" + HEAD % "embed")
    assert any("vnode 'x', field 'op'" in p and "conv9" in p for p in found)


def test_missing_input_names_vnode_and_field():
    found = problems(HEADER + EMBED + "  - {id: n, op: rmsnorm, inputs: [nowhere]}\n" + HEAD % "n")
    assert any("vnode 'n', field 'inputs'" in p and "nowhere" in p for p in found)


def test_cycle_is_reported_with_its_path():
    text = HEADER + EMBED + "  - {id: a, op: add, inputs: [embed, b]}\n  - {id: b, op: rmsnorm, inputs: [a]}\n" + HEAD % "b"
    found = problems(text)
    assert any("cycle" in p and ("a -> b -> a" in p or "b -> a -> b" in p) for p in found)


def test_shape_mismatch_names_vnode_and_field():
    text = HEADER + EMBED + "  - {id: n, op: rmsnorm, inputs: [embed], dim: 24}\n" + HEAD % "embed"
    found = problems(text)
    assert any("vnode 'n', field 'dim'" in p and "24" in p and "16" in p for p in found)


def test_tie_to_missing_weight():
    found = problems(HEADER + EMBED + "  - {id: head, op: tied_lm_head_ce, inputs: [embed, data.targets], tie: emb}\n")
    assert any("vnode 'head', field 'tie'" in p and "emb" in p for p in found)


def test_heads_must_divide_dim():
    found = problems(HEADER + EMBED + "  - {id: a, op: attention, inputs: [embed], heads: 3}\n" + HEAD % "a")
    assert any("vnode 'a', field 'heads'" in p for p in found)


def test_unknown_parameter_and_bad_yaml():
    found = problems(HEADER + EMBED + "  - {id: n, op: rmsnorm, inputs: [embed], colour: red}\n" + HEAD % "n")
    assert any("vnode 'n', field 'colour'" in p for p in found)
    assert "not valid YAML" in problems("name: [unclosed\n")[0]


def test_per_vnode_precision_overrides_default():
    text = HEADER.replace("hidden: 32}", "hidden: 32, precision: bf16}") + EMBED
    text += "  - {id: n, op: rmsnorm, inputs: [embed], precision: fp32}\n" + HEAD % "n"
    spec = load_network(text)
    assert spec.vnode("embed").precision == "bf16" and spec.vnode("n").precision == "fp32"


def test_recompute_is_a_network_default_with_per_vnode_overrides():
    text = HEADER.replace("hidden: 32}", "hidden: 32, recompute: true}") + EMBED
    text += "  - {id: n, op: rmsnorm, inputs: [embed], recompute: false}\n" + HEAD % "n"
    spec = load_network(text)
    assert [(v.id, v.recompute) for v in spec.vnodes] == [("embed", True), ("n", False), ("head", True)]
    assert not any(v.recompute for v in load_network(HEADER + EMBED + HEAD % "embed").vnodes)


def test_bad_network_defaults_name_the_field():
    for setting, field in (("precision: fp99", "defaults.precision"), ("recompute: maybe", "defaults.recompute"),
                           ("wire: int4", "defaults.wire")):
        found = problems(HEADER.replace("hidden: 32}", f"hidden: 32, {setting}}}") + EMBED + HEAD % "embed")
        assert any(f"field '{field}'" in p for p in found), found
def test_wire_per_vnode_with_a_network_default_and_its_bytes():
    text = HEADER.replace("hidden: 32}", "hidden: 32, wire: bf16}") + EMBED
    text += "  - {id: n, op: rmsnorm, inputs: [embed], wire: int8}\n" + HEAD % "n"
    graph = Graph(load_network(text))
    assert graph.spec.wire == "bf16" and graph.vnodes["embed"].wire is None and graph.wire("embed") == "bf16"
    assert graph.wire("n") == "int8"
    edge = {(e.src, e.dst): e for e in graph.edges}
    tokens = 2 * 8  # batch 2, context 8
    assert graph.edge_bytes_per_step(edge[("embed", "n")], 2) == 2 * tokens * 16 * 2  # both ways, bf16
    assert graph.edge_bytes_per_step(edge[("n", "head")], 2) == 2 * tokens * (16 + 4)  # int8 and a scale per token
    plain = Graph(load_network(HEADER + EMBED + "  - {id: n, op: rmsnorm, inputs: [embed]}\n" + HEAD % "n"))
    assert plain.spec.wire == "fp32" and plain.wire("n") == "fp32"


def test_bad_wire_settings_say_what_to_use():
    bad_default = HEADER.replace("hidden: 32}", "hidden: 32, wire: int4}") + EMBED + HEAD % "embed"
    assert problems(bad_default) == ["network, field 'defaults.wire': Input should be 'fp32', 'bf16', 'fp16' or 'int8'"]
    found = problems(HEADER + EMBED + "  - {id: n, op: rmsnorm, inputs: [embed], wire: zip}\n" + HEAD % "n")
    assert any("field 'wire'" in p and "'fp32', 'bf16', 'fp16' or 'int8'" in p for p in found), found


def test_init_seed_depends_on_session_seed_and_vnode_only():
    assert init_seed(1, "b0.attn") == init_seed(1, "b0.attn")
    assert init_seed(1, "b0.attn") != init_seed(2, "b0.attn")
    assert init_seed(1, "b0.attn") != init_seed(1, "b1.attn")
