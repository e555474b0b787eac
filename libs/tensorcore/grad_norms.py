"""Squared gradient norms per VNode: what a PNode reports so the orchestrator can clip globally.

Clipping by the global norm needs the norm over every parameter of the network, which no PNode
holds. Each PNode reports one number per hosted VNode, the squared L2 norm of that VNode's
gradients with the loss scale divided out; the orchestrator adds them in VNode-id order. A VNode's
number depends only on its own gradients, which are the same bits on every placement, so the
global norm and the clip factor are too (`computeall.orchestrator.clipping`).
"""

from __future__ import annotations

import torch
from torch import nn


# A gradient's norm is taken in pieces of this many elements, each widened to fp32 on its own (4 MiB): a
# whole bf16 table widened at once (seed-64heads': 64 MiB) was a PNode's peak.
PIECE_ELEMENTS = 1 << 20


@torch.no_grad()
def vnode_grad_sq_norms(params: dict[str, dict[str, nn.Parameter]], loss_scale: float = 1.0) -> dict[str, float]:
    """{vnode: sum over its parameters of |grad / loss_scale|^2}, for VNodes with parameters.

    Each piece's norm is taken in fp32 whatever its precision (as `clip_grad_norm_` over fp32 gradients
    does), then squared and summed in float64 on the host; a missing gradient counts as zero. A
    non-finite entry means an overflow somewhere in that VNode. One host read for all.
    """
    owners, pieces = [], []
    for vid, named in params.items():
        for p in named.values():
            if p.grad is not None:
                split = p.grad.reshape(-1).split(PIECE_ELEMENTS)
                owners += [vid] * len(split)
                pieces += split
    out = {vid: 0.0 for vid, named in params.items() if named}
    if not pieces:
        return out
    norms = torch.stack(torch._foreach_norm(pieces, 2, dtype=torch.float32)).double().cpu().tolist()
    for vid, norm in zip(owners, norms):
        out[vid] += (norm / loss_scale) ** 2
    return out
