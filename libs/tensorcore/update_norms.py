"""The size of an optimizer update next to the weights it moves: per VNode, for the update-to-weight ratio.

|update| / |weights| per layer is the practitioner's check that the learning rate suits every part
of the network (about 1e-3 is healthy for Adam; far above means the part thrashes, far below that
it does not learn). A PNode measures it every `update_ratio_every` steps: its optimizer's update
reports each parameter's squared norms of the change and of the master before it
(`VNodeOptimizer.measured_step`), the PNode sums them per hosted VNode, and the orchestrator sums
them per VNode group (a block) and records the ratio.
"""

from __future__ import annotations

from typing import Callable


def measured_update(
    owners: dict[str, str], step: Callable[[], dict[str, tuple[float, float]]]
) -> tuple[dict[str, float], dict[str, float]]:
    """Run `step` (the optimizer's `measured_step`) and sum what it measured per VNode:
    ({vnode: |update|^2}, {vnode: |weights|^2}), the weights as they were before; `owners` maps each
    parameter name to its VNode."""
    updates: dict[str, float] = {}
    weights: dict[str, float] = {}
    for name, (u, w) in sorted(step().items()):
        vid = owners[name]
        updates[vid] = updates.get(vid, 0.0) + u
        weights[vid] = weights.get(vid, 0.0) + w
    return updates, weights
