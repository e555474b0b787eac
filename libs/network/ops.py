"""The op catalogue: what each VNode op takes, produces and holds, without torch.

Each op declares its parameters (a pydantic model), how many inputs it reads, the
feature size of its output and its parameter count. Validation, the allocator and
the monitor read this; `computeall.tensorcore` implements the math.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from pydantic import BaseModel, ConfigDict, Field


class _Params(BaseModel):
    model_config = ConfigDict(extra="forbid")


class EmbeddingParams(_Params):
    vocab_size: int = Field(..., ge=2)
    dim: int = Field(..., ge=1)


class NormParams(_Params):
    dim: int = Field(..., ge=1)
    eps: float = Field(1e-5, gt=0)


class AttentionParams(_Params):
    dim: int = Field(..., ge=1)
    heads: int = Field(..., ge=1)
    rope_base: float = Field(10000.0, gt=0)


class SwiGLUParams(_Params):
    dim: int = Field(..., ge=1)
    hidden: int = Field(..., ge=1)


class AddParams(_Params):
    pass


class TiedHeadParams(_Params):
    dim: int = Field(..., ge=1)
    vocab_size: int = Field(..., ge=2)


class AttentionHeadParams(_Params):
    """One attention head: its own q/k/v projection slice, RoPE, causal attention."""

    dim: int = Field(..., ge=1)
    head_dim: int = Field(..., ge=2)
    head: int = Field(..., ge=0, description="the head's index in its block, 0..heads-1")
    rope_base: float = Field(10000.0, gt=0)


class ConcatHeadsParams(_Params):
    """Gathers `heads` head outputs (in head order) and applies the output projection.

    `head_dim` is the width of every input, or a list with one width per input.
    """

    dim: int = Field(..., ge=1)
    heads: int = Field(..., ge=1)
    head_dim: int | list[int]

    def widths(self) -> list[int]:
        return list(self.head_dim) if isinstance(self.head_dim, list) else [self.head_dim] * self.heads


class FusedAttentionHeadsParams(_Params):
    """Per-head VNodes fused into one (see computeall.network.head_fusion)."""

    dim: int = Field(..., ge=1)
    heads: int = Field(..., ge=1)
    head_dim: int = Field(..., ge=2)
    rope_base: float = Field(10000.0, gt=0)
    head_ids: list[str] = Field(default_factory=list, description="the per-head VNodes, in head order")


@dataclass(frozen=True)
class OpSpec:
    params: type[_Params]
    n_inputs: int | Callable[[_Params], int]  # a count, or one that depends on the parameters
    out_features: Callable[[_Params], int] | None  # None: the same as its inputs, which must agree
    param_count: Callable[[_Params], int]
    is_loss: bool = False
    ties_weight: bool = False  # reads its weight from the VNode named in `tie`


OPS: dict[str, OpSpec] = {
    "embedding": OpSpec(EmbeddingParams, 1, lambda p: p.dim, lambda p: p.vocab_size * p.dim),
    "rmsnorm": OpSpec(NormParams, 1, lambda p: p.dim, lambda p: p.dim),
    "layernorm": OpSpec(NormParams, 1, lambda p: p.dim, lambda p: 2 * p.dim),
    "attention": OpSpec(AttentionParams, 1, lambda p: p.dim, lambda p: 4 * p.dim * p.dim),
    "swiglu_mlp": OpSpec(SwiGLUParams, 1, lambda p: p.dim, lambda p: 3 * p.dim * p.hidden),
    "add": OpSpec(AddParams, 2, None, lambda p: 0),
    "tied_lm_head_ce": OpSpec(TiedHeadParams, 2, lambda p: 1, lambda p: 0, is_loss=True, ties_weight=True),
    "attention_head": OpSpec(AttentionHeadParams, 1, lambda p: p.head_dim, lambda p: 3 * p.dim * p.head_dim),
    "concat_heads": OpSpec(ConcatHeadsParams, lambda p: p.heads, lambda p: p.dim, lambda p: sum(p.widths()) * p.dim),
    "fused_attention_heads": OpSpec(
        FusedAttentionHeadsParams, 1, lambda p: p.dim, lambda p: 4 * p.heads * p.head_dim * p.dim
    ),
}


def n_inputs(op: OpSpec, params: _Params) -> int:
    """How many inputs a VNode of `op` with these parameters reads."""
    return op.n_inputs(params) if callable(op.n_inputs) else op.n_inputs

# Inputs that come from the dataset rather than from a VNode: token ids (B, T).
DATA_INPUTS = ("data.tokens", "data.targets")
