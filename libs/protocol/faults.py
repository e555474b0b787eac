"""Fault injection, a testing option: a PNode that misbehaves on purpose.

`computeall pnode --fault SPEC` (and `computeall run --fault PNODE=SPEC`) sets it on the command
line, never through a message. Two kinds:

- `corrupt:P` perturbs one value in a fraction P of the tensors its VNodes hand on: forward outputs,
  the gradients handed back to producers, and the results of the checks it runs for others. Which
  ones is a pure function of (PNode, step, micro-batch, VNode, what), so a run is reproducible and
  the benchmark can tell when a check should catch it.
- `mute:REQUEST[@STEP]` accepts every request of that kind (from step STEP on) and never answers,
  while it keeps heartbeating: the PNode that holds a session hostage.

Never use it on a real session.
"""

from __future__ import annotations

from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, model_validator

from .pnode_api import PNodeRequest
from .verification import uniform

FaultKind = Literal["output", "gradient", "check"]
REQUEST_KINDS = tuple(kind.model_fields["type"].default for kind in get_args(get_args(PNodeRequest)[0]))
_USE = "use corrupt:P with P between 0 and 1 (e.g. corrupt:0.1), or mute:REQUEST[@STEP] (e.g. mute:RunStep@3)"


class FaultSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    mode: Literal["corrupt", "mute"] = "corrupt"
    rate: float = Field(0.0, ge=0, le=1, description="corrupt: the share of outputs and gradients perturbed")
    request: str | None = Field(None, description="mute: the kind of request accepted and never answered")
    from_step: int = Field(0, ge=0, description="mute: from this step on (a request without a step: always)")

    @model_validator(mode="after")
    def _one_kind(self) -> FaultSpec:
        if (self.mode == "mute") != (self.request is not None):
            raise ValueError("a mute fault names its request, and only a mute fault does")
        if self.request is not None and self.request not in REQUEST_KINDS:
            raise ValueError(f"{self.request} is not a request a PNode gets ({', '.join(REQUEST_KINDS)})")
        return self

    @classmethod
    def parse(cls, text: str) -> FaultSpec:
        """`corrupt:P` with 0 <= P <= 1, or `mute:REQUEST[@STEP]`; ValueError saying what a valid value looks like."""
        mode, _, rest = text.partition(":")
        try:
            if mode == "corrupt":
                return cls(rate=float(rest))
            if mode == "mute":
                request, at, step = rest.partition("@")
                return cls(mode="mute", request=request, from_step=int(step) if at else 0)
            raise ValueError
        except ValueError:
            raise ValueError(f"fault {text!r} is not understood: {_USE}") from None

    def __str__(self) -> str:
        if self.mode == "mute":
            return f"mute:{self.request}" + (f"@{self.from_step}" if self.from_step else "")
        return f"{self.mode}:{self.rate:g}"

    def hits(self, pnode: str, step: int, micro: int, vnode: str, what: FaultKind) -> bool:
        return self.rate > 0 and uniform(f"fault/{pnode}/{step}/{micro}/{vnode}/{what}") < self.rate

    def mutes(self, request: str, step: int | None) -> bool:
        """Whether a request of this kind (for `step`) is accepted and never answered."""
        return request == self.request and (step is None or step >= self.from_step)


def parse_assignment(text: str) -> tuple[str, FaultSpec]:
    """`PNODE=SPEC` (for `computeall run --fault`): the PNode's name and its fault."""
    pnode, sep, spec = text.partition("=")
    if not sep or not pnode:
        raise ValueError(f"--fault {text!r} names no PNode: use PNODE=corrupt:P, e.g. pnode-2=corrupt:0.1")
    return pnode, FaultSpec.parse(spec)
