"""diloco's outer optimizer on one PNode: the anchor, Nesterov momentum, and how pseudo-gradients travel.

Between outer steps each replica trains alone (its own inner AdamW state, as in DiLoCo). At an
outer step each replica's pseudo-gradient of a VNode is `anchor - master` (fp32); the replicas sum
them over the replica tree, each partial sum travelling in the configured wire form (`bf16`, or
`int8` blocks with one fp32 scale each) and decoded on both sides of an exchange, so the two
partners add the same numbers. The average drives one Nesterov step from the anchor:

    v <- mu * v + avg ;  anchor <- anchor - lr * (avg + mu * v) ;  parameters <- anchor

Every replica does the same additions on the same decoded values, so they leave the outer step
with the same parameters, and a fixed replica count always gives the same bits.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from computeall.protocol.replica_sync import ReplicaSync

from .optimizer import VNodeOptimizer

INT8_BLOCK = 256  # elements per fp32 scale: 1.6% on top of one byte per element
OUTER = "outer/"


def encode(t: torch.Tensor, wire: str) -> torch.Tensor:
    """What travels for fp32 values `t` (flat): bf16, or uint8 bytes of [fp32 scales | int8 values]."""
    if wire == "bf16":
        return t.to(torch.bfloat16)
    n = t.numel()
    blocks = F.pad(t, (0, math.ceil(n / INT8_BLOCK) * INT8_BLOCK - n)).view(-1, INT8_BLOCK)
    scales = blocks.abs().amax(dim=1) / 127  # (blocks,)
    q = torch.round(blocks / scales.clamp_min(torch.finfo(torch.float32).tiny).unsqueeze(1)).clamp_(-127, 127)
    return torch.cat([scales.view(torch.uint8), q.to(torch.int8).view(-1)[:n].view(torch.uint8)])


def decode(payload: torch.Tensor, wire: str, numel: int) -> torch.Tensor:
    """The fp32 values a payload of `encode` stands for (the same bits on every PNode)."""
    if wire == "bf16":
        return payload.float()
    n_scales = math.ceil(numel / INT8_BLOCK)
    scales = payload[: 4 * n_scales].view(torch.float32)
    q = payload[4 * n_scales:].view(torch.int8).float()
    return q * scales.repeat_interleave(INT8_BLOCK)[:numel]


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
        out = {}
        for n in names:
            out[f"{OUTER}{n}.anchor"] = self.anchor[n].clone()
            out[f"{OUTER}{n}.momentum"] = self.momentum[n].clone()
        return out

    @torch.no_grad()
    def load_state_dict(self, names: list[str], tensors: dict[str, torch.Tensor]) -> None:
        """From a checkpoint; one without outer state (written without diloco) anchors at the loaded
        parameters with no momentum."""
        for n in names:
            anchor, momentum = tensors.get(f"{OUTER}{n}.anchor"), tensors.get(f"{OUTER}{n}.momentum")
            self.anchor[n].copy_(self.masters[n] if anchor is None else anchor)
            self.momentum[n].copy_(torch.zeros_like(self.momentum[n]) if momentum is None else momentum)
