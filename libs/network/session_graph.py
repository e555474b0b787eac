"""The graph a session runs: its network, the config's precision and wire, head fusion, vocabulary shards.

One function, so that the orchestrator's "does it fit now?", the driver's placement and the
monitor's overview of a session see the same VNodes: a bf16 session is weighed at bf16, a fused
one with its fused heads.
"""

from __future__ import annotations

from computeall.protocol.config import SessionConfig

from .graph import Graph
from .head_fusion import fuse_heads as fuse
from .loader import load_network
from .vocab_split import split_vocab


def session_graph(config: SessionConfig, fuse_heads: bool) -> tuple[Graph, list[str]]:
    """The session's graph as it will be placed, and the rewrites' log lines; raises `NetworkError`."""
    spec = load_network(config.network_yaml)
    if config.precision:  # the session's override beats every VNode's own setting
        for vnode in spec.vnodes:
            vnode.precision = config.precision
    if config.wire:  # the session's wire replaces the network's default, not a VNode's own
        spec.wire = config.wire
    lines: list[str] = []
    if fuse_heads:  # before allocation: the allocator places the fused VNodes
        spec, lines = fuse(spec)
    spec, split = split_vocab(spec)  # always: the shards are the network's math, wherever they are placed
    return Graph(spec), lines + split
