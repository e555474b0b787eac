"""diloco's outer optimizer on one PNode: the anchor and Nesterov momentum.

Between outer steps each replica trains alone (its own inner AdamW state, as in DiLoCo). At an
outer step each replica's pseudo-gradient of a VNode is `anchor - master` (fp32); the replicas sum
them over the replica tree (services/pnode/replica_sum.py), each partial sum travelling in the
configured wire format (`wire_formats.py`: `bf16`, or `int8` blocks with one fp32 scale each) and
decoded on both sides of an exchange, so the two partners add the same numbers. The average
drives one Nesterov step from the anchor:

    v <- mu * v + avg ;  anchor <- anchor - lr * (avg + mu * v) ;  parameters <- anchor

Every replica does the same additions on the same decoded values, so they leave the outer step
with the same parameters, and a fixed replica count always gives the same bits.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from computeall.protocol.replica_sync import ReplicaSync

from .optimizer import VNodeOptimizer

OUTER = "outer/"


class OuterOptimizer:
    def __init__(self, optimizer: VNodeOptimizer, sync: ReplicaSync) -> None:
        self.optimizer = optimizer
        self.sync = sync
        self.masters = optimizer.masters()
        self.anchor = {n: m.detach().clone() for n, m in self.masters.items()}
        self.momentum = {n: torch.zeros_like(m) for n, m in self.masters.items()}

    def pseudo_gradient(self, names: list[str]) -> torch.Tensor:
        """anchor - parameters, flat fp32, for `names` in order."""
        return torch.cat([(self.anchor[n] - self.masters[n]).reshape(-1) for n in names])

    @torch.no_grad()
    def step(self, names: list[str], summed: torch.Tensor, replicas: int) -> None:
        """The outer Nesterov step from the anchor with the replicas' summed pseudo-gradient."""
        mu, lr = self.sync.outer_momentum, self.sync.outer_lr
        offset = 0
        for n in names:
            size = self.masters[n].numel()
            avg = summed[offset: offset + size].view_as(self.masters[n]) / replicas
            offset += size
            v = self.momentum[n].mul_(mu).add_(avg)
            self.anchor[n].sub_(lr * (avg + mu * v))
            self.masters[n].copy_(self.anchor[n])
        self.optimizer.masters_changed()

    # -- persistence (beside the VNode's weights and inner optimizer state) -----------------
    def state_dict(self, names: list[str]) -> dict[str, torch.Tensor]:
        """Views of the state, for a caller that serializes them before the next outer step (a checkpoint)."""
        out = {}
        for n in names:
            out[f"{OUTER}{n}.anchor"] = self.anchor[n].detach()
            out[f"{OUTER}{n}.momentum"] = self.momentum[n].detach()
        return out

    @torch.no_grad()
    def load_state_dict(self, names: list[str], tensors: Mapping[str, torch.Tensor]) -> None:
        """From a checkpoint; one without outer state (written without diloco) anchors at the loaded
        parameters with no momentum."""
        for n in names:
            anchor, momentum = tensors.get(f"{OUTER}{n}.anchor"), tensors.get(f"{OUTER}{n}.momentum")
            self.anchor[n].copy_(self.masters[n] if anchor is None else anchor)
            self.momentum[n].copy_(torch.zeros_like(self.momentum[n]) if momentum is None else momentum)
