"""Fault injection, a testing option: a PNode that returns wrong results on purpose.

`computeall pnode --fault corrupt:P` (and `computeall run --fault PNODE=corrupt:P`) makes a PNode
perturb one value in a fraction P of the tensors its VNodes hand on: forward outputs, the
gradients handed back to producers, and the results of the checks it runs for others. Which
ones is a pure function of (PNode, step, micro-batch, VNode, what), so a run is reproducible and
the benchmark can tell when a check should catch it. Never use it on a real session.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from .verification import uniform

FaultKind = Literal["output", "gradient", "check"]


class FaultSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    mode: Literal["corrupt"] = "corrupt"
    rate: float = Field(..., ge=0, le=1, description="the share of outputs and gradients perturbed")

    @classmethod
    def parse(cls, text: str) -> FaultSpec:
        """`corrupt:P` with 0 <= P <= 1; ValueError saying what a valid value looks like."""
        mode, _, rate = text.partition(":")
        try:
            if mode != "corrupt":
                raise ValueError
            return cls(mode=mode, rate=float(rate))
        except ValueError:
            raise ValueError(f"fault {text!r} is not understood: use corrupt:P with P between 0 and 1, e.g. corrupt:0.1") from None

    def __str__(self) -> str:
        return f"{self.mode}:{self.rate:g}"

    def hits(self, pnode: str, step: int, micro: int, vnode: str, what: FaultKind) -> bool:
        return self.rate > 0 and uniform(f"fault/{pnode}/{step}/{micro}/{vnode}/{what}") < self.rate


def parse_assignment(text: str) -> tuple[str, FaultSpec]:
    """`PNODE=corrupt:P` (for `computeall run --fault`): the PNode's name and its fault."""
    pnode, sep, spec = text.partition("=")
    if not sep or not pnode:
        raise ValueError(f"--fault {text!r} names no PNode: use PNODE=corrupt:P, e.g. pnode-2=corrupt:0.1")
    return pnode, FaultSpec.parse(spec)
