"""Spot checks by exact recomputation: what PNodes commit to, what is checked, what a checker reports.

In a verified session every PNode sends, with its `RunStep` reply, a ledger: the digests of
everything its VNodes handed on in that step, per (micro-batch, VNode). Only then does the
orchestrator pick the items to check, so a PNode cannot know in advance which of its results
will be recomputed. A checker recomputes an item from the host's parameters and the inputs the
host read, and reports the digests of both; the orchestrator compares them with the ledgers
(`computeall.orchestrator.verification`).
"""

from __future__ import annotations

import hashlib

from pydantic import BaseModel, ConfigDict, Field


class ItemDigests(BaseModel):
    """The digests of what one VNode handed on for one micro-batch of a step.

    `output` is its forward output as its consumers receive it (the loss sum for a loss VNode);
    `input_grads` the gradient it handed back to each producer; `param_grads` its parameters'
    gradient contribution from this micro-batch. Backward fields stay empty for a forward-only
    check, and for a VNode whose output nothing reads.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    micro: int
    vnode: str
    output: str | None = None
    input_grads: dict[str, str] = Field(default_factory=dict)
    param_grads: str | None = None

    def forward_only(self) -> ItemDigests:
        return ItemDigests(micro=self.micro, vnode=self.vnode, output=self.output)


class CheckItem(BaseModel):
    """One (step, micro-batch, VNode) picked for recomputation, and by whom."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    step: int
    micro: int
    vnode: str
    pnode: str  # the host whose results are checked
    checker: str
    backward: bool  # the backward is recomputed too

    @property
    def check_id(self) -> str:
        return f"{self.step}/{self.micro}/{self.vnode}"

    @staticmethod
    def parse_check_id(check_id: str) -> tuple[int, int, str]:
        """(step, micro, vnode) of a `check_id`; ValueError when it is not one."""
        step, micro, vnode = check_id.split("/", 2)
        return int(step), int(micro), vnode


class KeepMaterial(BaseModel):
    """Sent to a host with `ApplyStep`: keep what recomputing this item needs, the parameters as
    they were before this update included."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    check_id: str
    micro: int
    vnode: str
    backward: bool


class CheckReport(BaseModel):
    """What a checker received from the host and what it recomputed from that. The checker judges
    nothing: the orchestrator compares `inputs` and `grads` with the producers' and consumers'
    ledgers and `result` with the host's."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    inputs: dict[str, str]  # producer VNode -> digest of the input received (dataset inputs are fetched, not sent)
    grads: dict[str, str] = Field(default_factory=dict)  # consumer VNode -> digest of its gradient (backward)
    result: ItemDigests


def uniform(key: str) -> float:
    """A number in [0, 1) that is a pure function of `key`: how the check stream and fault injection draw."""
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "big") / 2**64
