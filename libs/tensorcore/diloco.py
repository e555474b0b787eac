"""diloco's outer optimizer on one PNode: the anchor, Nesterov momentum, error feedback, and an outer
step waiting to land.

Between outer steps each replica trains alone (its own inner AdamW state, as in DiLoCo). At an
outer step each replica's pseudo-gradient of a VNode is `anchor - master` (fp32). The replicas sum
them over the replica tree (services/pnode/outer_sync.py): dense, each partial sum travelling in
the configured wire format (`wire_formats.py`: `bf16`, or `int8` blocks with one fp32 scale each)
and decoded on both sides of an exchange, so the two partners add the same numbers; or sparse
(`sparse_sync.py`, SparseLoCo): each replica sends the top entries of its pseudo-gradient plus its
error buffer, keeps the rest in the buffer, and every replica adds all the messages in replica
order. The average drives one Nesterov step from the anchor:

    v <- mu * v + avg ;  anchor <- anchor - lr * (avg + mu * v) ;  parameters <- anchor

With `overlap_steps` the inner steps go on while the sync travels, and the step lands after them
as the same move of the parameters: parameters <- parameters + (new anchor - the parameters the
sync started from), so what they learned meanwhile is kept and counts in the next pseudo-gradient.

Every replica does the same additions on the same decoded values, so they leave the outer step
with the same anchor, and a fixed replica count always gives the same bits.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from computeall.protocol.replica_sync import ReplicaSync

from .optimizer import VNodeOptimizer
from .sparse_sync import with_error_feedback

OUTER = "outer/"


class OuterOptimizer:
    def __init__(self, optimizer: VNodeOptimizer, sync: ReplicaSync) -> None:
        self.optimizer = optimizer
        self.sync = sync
        self.masters = optimizer.masters()
        self.anchor = {n: m.detach().clone() for n, m in self.masters.items()}
        self.momentum = {n: torch.zeros_like(m) for n, m in self.masters.items()} if sync.outer_momentum else {}
        feedback = sync.compression is not None and sync.compression.error_decay > 0
        self.error = {n: torch.zeros_like(m) for n, m in self.masters.items()} if feedback else {}
        self.landing: dict[str, torch.Tensor] = {}  # an outer step that lands `overlap_steps` later: its move

    def pseudo_gradient(self, names: list[str]) -> torch.Tensor:
        """anchor - parameters, flat fp32, for `names` in order."""
        return torch.cat([(self.anchor[n] - self.masters[n]).reshape(-1) for n in names])

    @torch.no_grad()
    def message(self, names: list[str], delta: torch.Tensor) -> torch.Tensor:
        """The sparse message of pseudo-gradient `delta` (compression only); the error buffers keep
        what it does not carry."""
        error = torch.cat([self.error[n].reshape(-1) for n in names]) if self.error else None
        message = with_error_feedback(delta, error, self.sync.compression)
        if error is not None:
            self._scatter(names, error, lambda n, part: self.error[n].copy_(part))
        return message

    @torch.no_grad()
    def step(self, names: list[str], summed: torch.Tensor, replicas: int, delta: torch.Tensor) -> None:
        """The outer Nesterov step from the anchor with the replicas' summed pseudo-gradient; this
        replica's was `delta`. It moves the parameters now, or with `overlap_steps` when it `land`s."""
        mu, lr = self.sync.outer_momentum, self.sync.outer_lr

        def outer(n: str, avg: torch.Tensor) -> None:
            move = avg
            if self.momentum:
                v = self.momentum[n].mul_(mu).add_(avg)
                move = avg + mu * v
            self.anchor[n].sub_(lr * move)
            if self.sync.overlap_steps:  # the new anchor less the parameters the sync started from
                self.landing[n] = delta_of[n] - lr * move
            else:
                self.masters[n].copy_(self.anchor[n])

        delta_of: dict[str, torch.Tensor] = {}
        self._scatter(names, delta, delta_of.__setitem__)
        self._scatter(names, summed / replicas, outer)
        if not self.sync.overlap_steps:
            self.optimizer.masters_changed()

    @torch.no_grad()
    def land(self, names: list[str]) -> None:
        """The outer step started `overlap_steps` ago moves the parameters, kept what they learned since."""
        for n in names:
            if n in self.landing:
                self.masters[n].add_(self.landing.pop(n))
        self.optimizer.masters_changed()

    def _scatter(self, names: list[str], flat: torch.Tensor, put) -> None:
        offset = 0
        for n in names:
            size = self.masters[n].numel()
            put(n, flat[offset: offset + size].view_as(self.masters[n]))
            offset += size

    # -- persistence (beside the VNode's weights and inner optimizer state) -----------------
    def state_dict(self, names: list[str]) -> dict[str, torch.Tensor]:
        """Views of the state, for a caller that serializes them before the next outer step (a checkpoint)."""
        out = {}
        for n in names:
            out[f"{OUTER}{n}.anchor"] = self.anchor[n].detach()
            for kind, state in (("momentum", self.momentum), ("error", self.error), ("landing", self.landing)):
                if n in state:
                    out[f"{OUTER}{n}.{kind}"] = state[n].detach()
        return out

    @torch.no_grad()
    def load_state_dict(self, names: list[str], tensors: Mapping[str, torch.Tensor]) -> None:
        """From a checkpoint; one without outer state (written without diloco) anchors at the loaded
        parameters with no momentum, no error and no step to land."""
        for n in names:
            anchor = tensors.get(f"{OUTER}{n}.anchor")
            self.anchor[n].copy_(self.masters[n] if anchor is None else anchor)
            for kind, state in (("momentum", self.momentum), ("error", self.error)):
                if n in state:
                    saved = tensors.get(f"{OUTER}{n}.{kind}")
                    state[n].copy_(torch.zeros_like(state[n]) if saved is None else saved)
            landing = tensors.get(f"{OUTER}{n}.landing")
            if landing is None:
                self.landing.pop(n, None)
            else:
                self.landing[n] = landing.clone().float()
