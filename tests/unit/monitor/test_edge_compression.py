"""The topology view's edges before and after compression: the bytes on the wire, the bytes the same
edge would carry in fp32 on an fp32 wire, and the ratio."""

from pathlib import Path

from computeall.monitor.network_edges import all_edges
from computeall.network import Graph, load_network

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "networks"
WAN = (EXAMPLES / "tiny-gpt-wan.yaml").read_text()
BATCH = 8


def edges_of(network_yaml: str, recorded: list[dict] | None = None) -> dict[tuple[str, str], dict]:
    graph = Graph(load_network(network_yaml))
    cut = graph.order.index("cut.up")  # the pipeline is cut at the bottleneck
    placement = {v: "p0" if i < cut else "p1" for i, v in enumerate(graph.order)}
    config = {"network_yaml": network_yaml, "batch_size": BATCH}
    return {(e["src"], e["dst"]): e for e in all_edges(config, placement, recorded or [])}


def test_the_bottleneck_edge_sends_int8_rows_of_its_rank_against_fp32_of_the_same_width():
    edge = edges_of(WAN)[("cut.down", "cut.up")]
    graph = Graph(load_network(WAN))
    tokens = BATCH * graph.spec.context
    rank = graph.out_features["cut.down"]
    assert edge["crosses"]
    assert edge["fp32_bytes_per_step"] == 2 * tokens * rank * 4
    assert edge["bytes_per_step"] < edge["fp32_bytes_per_step"]  # int8 with a scale per row
    assert edge["compression"] == edge["fp32_bytes_per_step"] / edge["bytes_per_step"] > 3


def test_an_fp32_edge_on_an_fp32_wire_is_not_compressed():
    edges = edges_of(WAN)
    block = edges[("b0.norm1", "b0.attn")]
    assert block["bytes_per_step"] == block["fp32_bytes_per_step"] and block["compression"] == 1.0


def test_a_network_that_cannot_be_rebuilt_shows_the_recorded_bytes_without_the_fp32_figures():
    edges = all_edges({"network_yaml": "not: a network"}, {"a": "p0", "b": "p1"},
                      [{"src": "a", "dst": "b", "bytes_per_step": 10}])
    assert edges == [{"src": "a", "dst": "b", "bytes_per_step": 10, "fp32_bytes_per_step": None,
                      "compression": None, "crosses": True}]
