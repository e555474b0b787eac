"""The update-to-weight ratio of every VNode group, from the PNodes' measured `ApplyStep` replies.

A VNode's group is its id up to the first dot: the copies a `repeat` makes are named `b0.norm1`,
`b0.attn`, ... so a group is one block, and a VNode outside any block (`embed`, `norm_f`) is its
own. The ratio is |update| / |weights| over the group's parameters, wherever they live.
"""

from __future__ import annotations

import math
from typing import Iterable

from computeall.protocol.pnode_api import PNodeReply


def vnode_group(vnode: str) -> str:
    return vnode.split(".", 1)[0]


def update_ratios(replies: Iterable[PNodeReply]) -> dict[str, float]:
    """{group: |update| / |weights|} over the VNodes the replies measured, groups in name order."""
    updates: dict[str, float] = {}
    weights: dict[str, float] = {}
    for reply in replies:
        updates.update(reply.update_sq_norms or {})
        weights.update(reply.weight_sq_norms or {})
    groups: dict[str, list[str]] = {}
    for vnode in updates:
        groups.setdefault(vnode_group(vnode), []).append(vnode)
    ratios = {}
    for group in sorted(groups):
        weight = math.fsum(weights[v] for v in groups[group])
        if weight > 0:
            ratios[group] = math.sqrt(math.fsum(updates[v] for v in groups[group]) / weight)
    return ratios
