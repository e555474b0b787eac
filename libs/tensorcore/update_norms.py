"""The size of an optimizer update next to the weights it moves: per VNode, for the update-to-weight ratio.

|update| / |weights| per layer is the practitioner's check that the learning rate suits every part
of the network (about 1e-3 is healthy for Adam; far above means the part thrashes, far below that
it does not learn). A PNode measures it every `update_ratio_every` steps: it keeps a copy of the
fp32 masters, runs the update, and reports per hosted VNode the squared norms of the difference
and of the weights before it; the orchestrator sums them per VNode group (a block) and records
the ratio. The copy is one fp32 word per parameter, held only during the update.
"""

from __future__ import annotations

from typing import Callable

import torch

from .optimizer import VNodeOptimizer


@torch.no_grad()
def measured_update(
    optimizer: VNodeOptimizer, owners: dict[str, str], step: Callable[[], None]
) -> tuple[dict[str, float], dict[str, float]]:
    """Run `step` (the optimizer's update) and measure it: ({vnode: |update|^2}, {vnode: |weights|^2}),
    the weights as they were before; `owners` maps each parameter name to its VNode."""
    masters = optimizer.masters()
    names = sorted(masters)
    if not names:  # a PNode hosting only parameter-free VNodes (a residual add)
        step()
        return {}, {}
    before = [masters[n].clone() for n in names]
    weight_norms = torch.stack(torch._foreach_norm(before))
    step()
    torch._foreach_sub_(before, [masters[n] for n in names])  # before - after: the update, negated
    update_norms = torch.stack(torch._foreach_norm(before))
    updates: dict[str, float] = {}
    weights: dict[str, float] = {}
    for name, u, w in zip(names, update_norms.double().tolist(), weight_norms.double().tolist()):
        vid = owners[name]
        updates[vid] = updates.get(vid, 0.0) + u * u
        weights[vid] = weights.get(vid, 0.0) + w * w
    return updates, weights
