"""The graph a session runs, as its fold stands (head fusion as the last resume set it)."""

from __future__ import annotations

from computeall.network import Graph
from computeall.network.session_graph import session_graph as configured_graph
from computeall.protocol.session_state import SessionState


def session_graph(state: SessionState) -> tuple[Graph, list[str]]:
    """The session's graph as it will be placed, and the rewrites' log lines; raises `NetworkError`."""
    return configured_graph(state.config, state.fuse_heads)
