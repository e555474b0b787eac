"""How data-parallel replicas of a session's pipeline keep their parameters together.

`gradients` (the default): every step's gradients are summed over the replicas along the fixed
micro-batch tree (`micro_tree`), so every replica applies the same update and R = 1, 2, 4 give
the same bits. `diloco`: each replica takes `inner_steps` AdamW steps on its own micro-batches,
then the replicas average their pseudo-gradients (anchor - local parameters, sent as bf16 or
int8, or sparse: `compression`) and take one outer Nesterov step from the anchor, which lands
`overlap_steps` inner steps later, so the sync travels while they compute. Far fewer bytes cross
the network; the result depends on R (still deterministic for a fixed R). An inner step's skip and
clip factor are decided from replica 0's gradient norm for every replica by the orchestrator
(`inner_decisions: shared`), or by each replica's PNodes from its own (`own`): then no step waits
for a round trip to the orchestrator, which a slow link to it makes a tenth of a step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from .wire import encoded_bytes

Replicas = int | Literal["auto"]

SCALE_BYTES = 2  # a chunk's magnitude levels travel as bf16


@dataclass(frozen=True)
class SparseLayout:
    """How a flat vector of `elements` values is cut for the sparse sync, and what its message weighs."""

    elements: int
    chunk: int  # values per chunk (a power of two); the last chunk is padded with zeros
    chunks: int
    k: int  # entries sent per chunk
    index_bits: int  # log2(chunk): an entry's place in its chunk
    levels: int  # magnitude levels per chunk

    @property
    def entries(self) -> int:
        return self.chunks * self.k

    @property
    def scale_bytes(self) -> int:
        return self.chunks * self.levels * SCALE_BYTES

    @property
    def sign_bytes(self) -> int:
        return math.ceil(self.entries / 8)

    @property
    def index_bytes(self) -> int:
        return math.ceil(self.entries * self.index_bits / 8)

    @property
    def message_bytes(self) -> int:
        """The exact size of one replica's message: scales, then signs, then places (bit-packed)."""
        return self.scale_bytes + self.sign_bytes + self.index_bytes


class SparseCompression(BaseModel):
    """diloco's pseudo-gradients as SparseLoCo sends them: top-k per chunk, a few bits, error feedback.

    Each replica adds its pseudo-gradient to its error buffer (decayed by `error_decay`), sends the
    `top_k` largest entries of every chunk of `chunk` values by magnitude (ties: the lower index),
    each as its place in the chunk and its sign, in rank order, and keeps what it did not send in
    the buffer. A chunk's entries fall into 2**(bits-1) equal groups by rank, and each group travels
    as one magnitude: the mean of its entries. The replicas gather every message and add them in
    replica order, so all hold the same sum."""

    model_config = ConfigDict(extra="forbid")

    top_k: float = Field(1 / 64, gt=0, le=1, description="the share of each chunk's entries sent")
    chunk: int = Field(4096, ge=2, le=1 << 16, description="values per chunk, a power of two")
    bits: int = Field(2, ge=1, le=4, description="bits per sent value: its sign, and 2**(bits-1) magnitude levels")
    error_decay: float = Field(0.95, ge=0, le=1, description="the error buffer's decay per outer step; 0: no error feedback")

    @field_validator("chunk")
    @classmethod
    def _power_of_two(cls, chunk: int) -> int:
        if chunk & (chunk - 1):
            raise ValueError(f"chunk is {chunk}; it must be a power of two (e.g. {1 << chunk.bit_length() - 1}), "
                             f"so an entry's place in its chunk fills its bits")
        return chunk

    def layout(self, elements: int) -> SparseLayout:
        """A vector shorter than a chunk is one chunk of the next power of two."""
        chunk = min(self.chunk, 1 << max(0, elements - 1).bit_length())
        k = min(chunk, max(1, round(self.top_k * chunk)))
        return SparseLayout(elements=elements, chunk=chunk, chunks=math.ceil(elements / chunk), k=k,
                            index_bits=chunk.bit_length() - 1, levels=min(k, 1 << (self.bits - 1)))


class ReplicaSync(BaseModel):
    model_config = ConfigDict(extra="forbid")

    mode: Literal["gradients", "diloco"] = "gradients"
    inner_steps: int = Field(20, ge=1, description="diloco: local steps between two outer steps (H)")
    # DiLoCo's paper uses 0.7 and 0.9 with H = 500 over long runs; over a few hundred steps that
    # momentum costs ~8% of loss, these ~1.4% (docs/decisions.md, "diloco")
    outer_lr: float = Field(0.8, gt=0, description="diloco: the outer Nesterov step's learning rate")
    outer_momentum: float = Field(0.5, ge=0, lt=1, description="diloco: the outer Nesterov momentum")
    wire: Literal["bf16", "int8"] = Field("bf16", description="diloco: how pseudo-gradients travel (without compression)")
    compression: SparseCompression | None = Field(
        None, description="diloco: send sparse pseudo-gradients with error feedback instead (SparseLoCo)")
    overlap_steps: int = Field(
        0, ge=0, description="diloco: inner steps that run while an outer sync travels; its step lands after them")
    inner_decisions: Literal["shared", "own"] = Field(
        "shared", description="diloco: who decides an inner step's skip and clip factor: `shared`, the orchestrator, "
                              "from replica 0's gradient norm for every replica; `own`, each replica from its own norm "
                              "on its PNodes (as DiLoCo's workers do), so a step never waits for the orchestrator")

    @model_validator(mode="after")
    def _diloco_settings_need_diloco(self) -> ReplicaSync:
        if self.mode != "diloco" and (self.compression is not None or self.overlap_steps
                                      or self.inner_decisions != "shared"):
            raise ValueError("sync.compression, sync.overlap_steps and sync.inner_decisions apply to diloco: "
                             "set sync.mode: diloco, or leave them out")
        if self.overlap_steps >= self.inner_steps:
            raise ValueError(f"sync.overlap_steps is {self.overlap_steps}: an outer step must land before the next "
                             f"sync starts, so it must be below inner_steps ({self.inner_steps})")
        return self

    @property
    def replicas_decide(self) -> bool:
        """Each replica's PNodes decide its inner steps' skip and clip (`inner_decisions: own`)."""
        return self.mode == "diloco" and self.inner_decisions == "own"

    def is_outer_step(self, step: int) -> bool:
        """diloco: whether the replicas start an outer sync after `step` (its inner update applied)."""
        return self.mode == "diloco" and (step + 1) % self.inner_steps == 0

    def sent_bytes(self, elements: int, replicas: int) -> int:
        """diloco: the bytes one PNode sends in an outer sync for a VNode of `elements` parameters: the
        sparse message to each other replica (`butterfly.gathered` forwards what it holds), or the
        whole encoded pseudo-gradient at each of the butterfly's log2(R) levels. None without diloco."""
        if self.mode != "diloco":
            return 0
        if self.compression is not None:
            return (replicas - 1) * self.compression.layout(elements).message_bytes
        encoding, dtype = ("int8-block", "float32") if self.wire == "int8" else ("raw", "bfloat16")
        return (replicas - 1).bit_length() * encoded_bytes(encoding, dtype, (elements,))

    def lands_after(self, step: int) -> bool:
        """diloco: whether an outer step lands after `step`: `overlap_steps` after a sync started."""
        started = step - self.overlap_steps
        return started >= 0 and self.is_outer_step(started)
