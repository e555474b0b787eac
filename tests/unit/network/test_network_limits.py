"""Network YAML over a limit is refused cheaply with a reason; a network at the limits loads in linear time."""

from pathlib import Path

import pytest

from computeall.network import Graph, NetworkError, load_network
from computeall.network.loader import find_cycle
from computeall.protocol.limits import NETWORK_VNODES, NETWORK_YAML_BYTES, NETWORK_YAML_DEPTH, NETWORK_YAML_NODES

MICRO = (Path(__file__).resolve().parents[3] / "examples" / "networks" / "micro-gpt.yaml").read_text()


def refusal(text: str) -> str:
    with pytest.raises(NetworkError) as info:
        load_network(text)
    assert len(info.value.problems) == 1
    return info.value.problems[0]


def blocks(count: int) -> str:
    """micro-gpt with `count` blocks: 6 * count + 3 VNodes, a chain as long as the network."""
    return MICRO.replace("count: 2", f"count: {count}").replace("inputs: [b1.res2]", f"inputs: [b{count - 1}.res2]")


def test_deep_nesting_is_refused_before_loading():
    block_style = "name: x\nvnodes:\n" + "".join("  " * (i + 1) + "- \n" for i in range(NETWORK_YAML_DEPTH + 5))
    assert f"nests deeper than {NETWORK_YAML_DEPTH} levels" in refusal(block_style)
    flow_style = "name: x\nvnodes: " + "[" * 5000 + "]" * 5000  # libyaml's own nesting limit may speak first
    assert "depth" in refusal(flow_style)


def test_aliases_count_as_what_they_stand_for():
    bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
    for name, prev in zip("bcdefg", "abcdef"):
        bomb += f"{name}: &{name} [{', '.join([f'*{prev}'] * 10)}]\n"
    assert f"more than {NETWORK_YAML_NODES:,} values" in refusal(bomb)


def test_bytes_and_vnodes_over_the_limits():
    assert f"at most {NETWORK_YAML_BYTES:,}" in refusal(MICRO + "#" * NETWORK_YAML_BYTES)
    over = NETWORK_VNODES // 6 + 1
    assert f"has {6 * over + 3:,} VNodes once `repeat` is expanded" in refusal(blocks(over))


def test_a_network_at_the_vnode_limit_loads():
    count = (NETWORK_VNODES - 3) // 6
    spec = load_network(blocks(count))  # one chain of 4,095 VNodes: no recursion limit on the way
    graph = Graph(spec)
    assert len(graph.order) == len(spec.vnodes) == 6 * count + 3
    assert graph.order[:3] == ["embed", "b0.norm1", "b0.attn"] and graph.order[-1] == "head"
    assert find_cycle(spec) == []


def test_a_cycle_through_thousands_of_vnodes_is_found():
    around = blocks(600).replace("input: embed", "input: b599.res2")  # the first block reads the last
    with pytest.raises(NetworkError) as info:
        load_network(around)
    cycles = [p for p in info.value.problems if "cycle" in p]
    assert cycles == ["vnode 'b599.res2', field 'inputs': cycle b599.res2 -> b599.res1 -> b598.res2 -> b598.res1 -> "
                      "b597.res2 -> ... 1191 more ... -> b1.res2 -> b1.res1 -> b0.res2 -> b0.res1 -> b599.res2"]
