"""The network YAML, as typed models: what users write and what it resolves to.

A file holds network-level settings, `defaults` (op parameters, and the precision, wire and recompute that
every VNode inherits) and a list of entries: a VNode or a `repeat` macro.

    name: tiny-gpt
    vocab_size: 4096
    context: 256
    defaults: {dim: 256, heads: 8, hidden: 688, precision: fp32, wire: fp32}
    vnodes:
      - {id: embed, op: embedding, inputs: [data.tokens]}
      - repeat: {count: 4, input: embed, output: "b{i}.res2", vnodes: [...]}
      - {id: head, op: tied_lm_head_ce, inputs: [norm_f, data.targets], tie: embed}
"""

from __future__ import annotations

from typing import Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field

from computeall.protocol.wire import Wire

Precision = Literal["fp32", "bf16", "fp16"]


class VNodeEntry(BaseModel):
    """One VNode as written; op parameters sit beside the fixed fields."""

    model_config = ConfigDict(extra="allow")

    id: str = Field(..., min_length=1, max_length=128)
    op: str
    inputs: list[str] = Field(default_factory=list)
    tie: str | None = None
    precision: Precision | None = None
    recompute: bool | None = None
    wire: Wire | None = None

    @property
    def op_params(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


class RepeatSpec(BaseModel):
    """`count` copies of `vnodes`; `{i}` is the copy's index (counted from `first`), `{in}` its input.

    `{in}` is `input` in the first copy and the previous copy's `output` after that. `first` lets a
    second `repeat` go on numbering where an earlier one stopped (blocks on either side of a bottleneck).
    """

    model_config = ConfigDict(extra="forbid")

    count: int = Field(..., ge=1, le=4096)
    first: int = Field(0, ge=0)
    input: str
    output: str
    vnodes: list[VNodeEntry]


class RepeatEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")

    repeat: RepeatSpec


class NetworkDefaults(BaseModel):
    """What every VNode inherits: its settings below, and op parameters (any other key) for the
    ops that take them."""

    model_config = ConfigDict(extra="allow")

    precision: Precision = "fp32"
    wire: Wire = "fp32"
    recompute: bool = False

    @property
    def op_params(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


class NetworkFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(..., min_length=1)
    vocab_size: int = Field(..., ge=2, le=1 << 20)
    context: int = Field(..., ge=1)
    defaults: NetworkDefaults = Field(default_factory=NetworkDefaults)
    vnodes: list[Union[RepeatEntry, VNodeEntry]]


class VNodeSpec(BaseModel):
    """A resolved VNode: macros expanded, defaults merged, parameters checked."""

    model_config = ConfigDict(extra="forbid")

    id: str
    op: str
    inputs: list[str]
    tie: str | None = None
    precision: Precision
    wire: Wire | None = None  # None: the network's default (`NetworkSpec.wire`)
    params: dict[str, Any]
    # keep only the inputs in forward and run the forward again in backward: activation memory for compute
    recompute: bool = False


class NetworkSpec(BaseModel):
    """What the rest of the system works with; sent to PNodes inside their plan."""

    model_config = ConfigDict(extra="forbid")

    name: str
    vocab_size: int
    context: int
    wire: Wire = "fp32"  # for VNodes that name none; a session's `wire` replaces it
    vnodes: list[VNodeSpec]

    def vnode(self, vid: str) -> VNodeSpec:
        for v in self.vnodes:
            if v.id == vid:
                return v
        raise KeyError(vid)
