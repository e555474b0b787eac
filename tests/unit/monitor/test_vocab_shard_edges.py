"""The topology view draws the network as a session runs it: a large vocabulary's shards and their edges."""

from pathlib import Path

from computeall.monitor.network_edges import all_edges

MICRO = (Path(__file__).resolve().parents[3] / "examples" / "networks" / "llama-micro.yaml").read_text()


def test_the_shards_and_their_edges_are_drawn():
    shards = {f"{v}.shard{s}": "p0" if s < 2 else "p1" for v in ("embed", "head") for s in range(4)}
    placement = {"embed": "p1", "head": "p2", "norm_f": "p2", **shards}
    for block in ("b0", "b1"):
        placement.update({f"{block}.{part}": "p2" for part in ("norm1", "attn", "res1", "norm2", "mlp", "res2")})
    edges = {(e["src"], e["dst"]): e["crosses"] for e in all_edges({"network_yaml": MICRO}, placement, [])}
    assert edges[("embed.shard0", "embed")] and not edges[("embed.shard3", "embed")]
    assert edges[("norm_f", "head.shard1")] and edges[("head.shard2", "head")]
    assert {(f"head.shard{s}", "head") for s in range(4)} <= set(edges)
