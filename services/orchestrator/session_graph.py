"""The graph a session runs: its network, the config's precision and wire, head fusion.

One function, so that the orchestrator's "does it fit now?" and the driver's placement size
the same VNodes: a bf16 session is weighed at bf16, a fused one with its fused heads.
"""

from __future__ import annotations

from computeall.network import Graph, load_network
from computeall.network.head_fusion import fuse_heads
from computeall.protocol.session_state import SessionState


def session_graph(state: SessionState) -> tuple[Graph, list[str]]:
    """The session's graph as it will be placed, and head fusion's log lines; raises `NetworkError`."""
    spec = load_network(state.config.network_yaml)
    if state.config.precision:  # the session's override beats every VNode's own setting
        for vnode in spec.vnodes:
            vnode.precision = state.config.precision
    if state.config.wire:  # the session's wire replaces the network's default, not a VNode's own
        spec.wire = state.config.wire
    lines: list[str] = []
    if state.fuse_heads:  # before allocation: the allocator places the fused VNodes
        spec, lines = fuse_heads(spec)
    return Graph(spec), lines
