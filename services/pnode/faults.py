"""A PNode that returns wrong results on purpose (`--fault corrupt:P`): for tests and benchmarks only.

Which results are hit is `FaultSpec.hits` (a pure function of PNode, step, micro-batch, VNode and
what); here is only how: one value of the tensor changes, in a copy, so nothing the PNode keeps
for its own backward is touched.
"""

from __future__ import annotations

import logging

import torch

from computeall.protocol.faults import FaultKind, FaultSpec
from computeall.protocol.verification import uniform

log = logging.getLogger("computeall.pnode.faults")


def perturbed(tensor: torch.Tensor, key: str) -> torch.Tensor:
    """A copy of `tensor` with one value changed: doubled, or 1 where it was 0."""
    out = tensor.clone()
    flat = out.view(-1)
    if flat.numel() == 0:
        return out
    i = int(uniform(f"{key}/index") * flat.numel())
    with torch.no_grad():
        flat[i] = torch.where(flat[i] == 0, torch.ones_like(flat[i]), flat[i] * 2)
    return out


class Faults:
    """The faults of one PNode, applied to what its VNodes hand on."""

    def __init__(self, spec: FaultSpec, pnode: str) -> None:
        self.spec = spec
        self.pnode = pnode

    def apply(self, tensor: torch.Tensor, step: int, micro: int, vnode: str, what: FaultKind) -> torch.Tensor:
        if not self.spec.hits(self.pnode, step, micro, vnode, what):
            return tensor
        log.warning("fault injection: corrupting the %s of %s (step %d, micro %d)", what, vnode, step, micro)
        return perturbed(tensor, f"{self.pnode}/{step}/{micro}/{vnode}/{what}")
