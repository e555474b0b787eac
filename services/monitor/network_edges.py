"""Every edge of a session's network, for the topology view.

The orchestrator records only the edges that cross PNodes (the traffic allocation minimises),
but a picture of the network needs all of them. The monitor rebuilds the graph from the
session's own network YAML with `computeall.network` (shared library code, no torch) and marks
which edges cross; the recorded crossing figures win where they exist.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from computeall.network import Graph, load_network
from computeall.network.head_fusion import fuse_heads
from computeall.network.vocab_split import split_vocab


@lru_cache(maxsize=64)
def _graph_edges(network_yaml: str, batch_size: int, fused: bool) -> tuple[tuple[str, str, int, int], ...]:
    spec = load_network(network_yaml)
    graph = Graph(split_vocab(fuse_heads(spec)[0] if fused else spec)[0])  # a large vocabulary always runs in shards
    return tuple((e.src, e.dst, graph.edge_bytes_per_step(e, batch_size), graph.edge_fp32_bytes_per_step(e, batch_size))
                 for e in graph.edges)


@lru_cache(maxsize=64)
def _vnode_ids(network_yaml: str) -> frozenset[str]:
    return frozenset(v.id for v in load_network(network_yaml).vnodes)


def all_edges(config: dict[str, Any] | None, placement: dict[str, str], recorded: list[dict]) -> list[dict]:
    """(src, dst, bytes_per_step, fp32_bytes_per_step, compression, crosses) for every edge between
    VNodes: its bytes on its wire, the bytes it would carry in fp32 on an fp32 wire, and how many
    times fewer it sends (narrow edges and narrow wires). Only the recorded crossing edges, without
    the fp32 figures, when the network cannot be rebuilt (an older or foreign config)."""
    crossing = {(e["src"], e["dst"]): e["bytes_per_step"] for e in recorded}
    try:
        # placed with attention heads fused (the per-head VNodes are absent): draw the fused graph
        fused = bool(placement) and not _vnode_ids(config["network_yaml"]) <= set(placement)
        edges = _graph_edges(config["network_yaml"], int(config.get("batch_size", 8)), fused)
    except Exception:  # noqa: BLE001 - any config the library rejects reads as "unknown graph"
        return [{**e, "fp32_bytes_per_step": None, "compression": None, "crosses": True} for e in recorded]
    out = []
    for src, dst, nbytes, fp32 in edges:
        if src not in placement or dst not in placement:
            continue  # an input from the dataset, not a VNode
        sent = crossing.get((src, dst), nbytes)
        out.append({"src": src, "dst": dst, "bytes_per_step": sent, "fp32_bytes_per_step": fp32,
                    "compression": fp32 / sent if sent else None, "crosses": placement[src] != placement[dst]})
    return out
