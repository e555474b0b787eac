"""Where a tensor between PNodes belongs: its route on the wire and its key in a stage's inbox.

A forward pass sends each VNode's output (an activation) to every PNode hosting one of its
consumers; the backward pass sends each consumer's gradient of that output back to its
producer, one per consumer (they are summed on the producer's side, in graph order). With
replicas, a VNode's partial sum of gradients over some micro-batches goes to the PNode hosting
that VNode in another replica (`replica_sum.py`), and so does diloco's outer sync of its
pseudo-gradients (`outer_sync.py`), named by the micro-batches of the replicas it covers. Where
each replica decides its own inner steps, its PNodes tell each other their gradients' squared norms
(`replica_norms.py`), named by the sender's first VNode. The route
travels as the frame's `meta` (docs/protocol.md, "Tensor frames"); the receiving stage files the
tensor under the route's key until the work item that reads it runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from computeall.protocol.wire import WireError

Phase = Literal["train", "val"]  # a training step (forward and backward) or a validation (forward only)


@dataclass(frozen=True)
class PassId:
    """One pass of a stage: tensors of another pass never mix into it."""

    phase: str  # a `Phase`, or "aborted" for a stage whose pass in flight must give up
    step: int


@dataclass(frozen=True)
class ActivationKey:
    """In an inbox: the output of VNode `src` for one micro-batch of a pass."""

    phase: str
    step: int
    micro: int
    src: str


@dataclass(frozen=True)
class PartialSumKey:
    """In a replica sum's inbox: another replica's sum of VNode `src`'s parameter gradients over
    micro-batches [lo, hi) of a step; in an outer sync's, the replicas' pseudo-gradients (summed, or
    their messages side by side) of the replicas running those micro-batches, from the step's end."""

    phase: str
    step: int
    src: str
    lo: int
    hi: int


@dataclass(frozen=True)
class GradientKey:
    """In an inbox: the gradient of VNode `src`'s output, handed back by its `consumer`."""

    phase: str
    step: int
    micro: int
    src: str
    consumer: str


class TensorRoute(BaseModel):
    model_config = ConfigDict(frozen=True)

    session: str
    phase: Phase
    step: int
    micro: int
    kind: Literal["act", "grad", "sum", "outer", "norms"]
    src: str  # the VNode whose output this is (a gradient: of that output; a sum or outer sync: of its parameters;
    # norms: the sender's first VNode)
    consumer: str | None = None  # a gradient: the VNode that computed it
    micro_end: int | None = None  # a sum or outer sync: over micro-batches [micro, micro_end)

    @model_validator(mode="after")
    def _gradients_name_their_consumer(self) -> TensorRoute:
        if self.kind == "grad" and self.consumer is None:
            raise ValueError("a gradient names its consumer")
        if self.kind in ("sum", "outer") and (self.micro_end is None or self.micro_end <= self.micro):
            raise ValueError(f"a {self.kind} names the micro-batches [micro, micro_end) it covers")
        return self

    @classmethod
    def activation(cls, session: str, phase: str, step: int, micro: int, src: str) -> TensorRoute:
        return cls(session=session, phase=phase, step=step, micro=micro, kind="act", src=src)

    @classmethod
    def gradient(cls, session: str, phase: str, step: int, micro: int, src: str, consumer: str) -> TensorRoute:
        return cls(session=session, phase=phase, step=step, micro=micro, kind="grad", src=src, consumer=consumer)

    @classmethod
    def partial_sum(cls, session: str, step: int, src: str, lo: int, hi: int) -> TensorRoute:
        return cls(session=session, phase="train", step=step, micro=lo, kind="sum", src=src, micro_end=hi)

    @classmethod
    def outer_sync(cls, session: str, step: int, src: str, lo: int, hi: int) -> TensorRoute:
        """diloco: the outer sync that starts after `step`, of the replicas running micro-batches [lo, hi)."""
        return cls(session=session, phase="train", step=step, micro=lo, kind="outer", src=src, micro_end=hi)

    @classmethod
    def norms(cls, session: str, step: int, micro: int, src: str) -> TensorRoute:
        """The squared gradient norms of `step` of the VNodes hosted with `src` (the sender's first VNode), to
        the other PNodes of its replica, whose block of micro-batches begins with `micro`."""
        return cls(session=session, phase="train", step=step, micro=micro, kind="norms", src=src)

    @classmethod
    def from_wire(cls, key: str, meta: dict) -> TensorRoute:
        """The route of a received frame; `WireError` naming what is missing or wrong."""
        try:
            return cls.model_validate(meta)
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'meta'}: {e['msg']}" for e in exc.errors())
            raise WireError(f"tensor {key!r} has incomplete routing metadata {meta} ({problems})") from None

    def wire_meta(self) -> dict:
        return self.model_dump(exclude_none=True)

    @property
    def wire_key(self) -> str:
        """The frames' key: unique per tensor in flight, so chunks of two tensors never mix."""
        base = f"{self.session}/{self.phase}/{self.step}/{self.micro}/{self.kind}/{self.src}"
        if self.kind in ("sum", "outer"):
            return f"{base}/{self.micro_end}"
        return base if self.consumer is None else f"{base}/{self.consumer}"

    @property
    def inbox_key(self) -> ActivationKey | GradientKey | PartialSumKey:
        if self.kind == "act":
            return ActivationKey(self.phase, self.step, self.micro, self.src)
        if self.kind in ("sum", "outer"):
            return PartialSumKey(self.phase, self.step, self.src, self.micro, self.micro_end)
        return GradientKey(self.phase, self.step, self.micro, self.src, self.consumer)


def first_vnodes(assignment: dict[str, str], order: list[str]) -> dict[str, str]:
    """{PNode of a replica: the first VNode it hosts, in graph order}: what names its norms on the wire."""
    firsts: dict[str, str] = {}
    for vid in order:
        firsts.setdefault(assignment[vid], vid)
    return firsts


class CheckPartRoute(BaseModel):
    """A piece of a check's material, host to checker: `part` is `param.<name>`, `input.<slot>` or
    `grad.<consumer>`, and `parts` how many the check has, so the checker knows when it has them all."""

    model_config = ConfigDict(frozen=True)

    session: str
    kind: Literal["check"] = "check"
    check: str
    part: str
    parts: int

    @classmethod
    def from_wire(cls, key: str, meta: dict) -> CheckPartRoute:
        try:
            return cls.model_validate(meta)
        except ValidationError as exc:
            raise WireError(f"check material {key!r} has incomplete metadata {meta}: {exc.errors()[:2]}") from None

    def wire_meta(self) -> dict:
        return self.model_dump()

    @property
    def wire_key(self) -> str:
        return f"{self.session}/check/{self.check}/{self.part}"
