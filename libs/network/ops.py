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


@dataclass(frozen=True)
class OpSpec:
    params: type[_Params]
    n_inputs: int
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
}

# Inputs that come from the dataset rather than from a VNode: token ids (B, T).
DATA_INPUTS = ("data.tokens", "data.targets")
