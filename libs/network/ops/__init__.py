"""The op registry: one entry per VNode op, without torch.

Each entry (`OpSpec`, one small file per op here) declares the op's YAML parameters, how many
inputs it reads and how wide they are, the width of its output, its parameter count, its
shape check, its FLOPs and activation-memory models and the torch module that implements it
(by dotted path). Validation (`loader`), the graph, the allocator and `computeall.tensorcore`
all read `OPS`; nothing else in the code branches on an op's name.

Adding an op: a file here that defines its params model and `OP = OpSpec(...)`, its name in
`OPS` below, and its torch module in `libs/tensorcore/ops/`.
"""

from . import add, attention, attention_head, bottleneck, concat_heads, embedding, fused_heads, norms, swiglu, tied_head
from .add import AddParams
from .attention import AttentionParams
from .attention_head import AttentionHeadParams
from .bottleneck import BottleneckParams
from .concat_heads import ConcatHeadsParams
from .embedding import EmbeddingParams
from .fused_heads import FusedAttentionHeadsParams
from .norms import NormParams
from .spec import DATA_INPUTS, OpParams, OpSpec, Problem, Site, TiedWeight, catalogue, n_inputs
from .swiglu import SwiGLUParams
from .tied_head import TiedHeadParams

OPS: dict[str, OpSpec] = catalogue(
    embedding.OP,
    norms.RMSNORM,
    norms.LAYERNORM,
    attention.OP,
    swiglu.OP,
    add.OP,
    tied_head.OP,
    attention_head.OP,
    concat_heads.OP,
    fused_heads.OP,
    bottleneck.DOWN,
    bottleneck.UP,
)


__all__ = [
    "DATA_INPUTS",
    "OPS",
    "AddParams",
    "AttentionHeadParams",
    "AttentionParams",
    "BottleneckParams",
    "ConcatHeadsParams",
    "EmbeddingParams",
    "FusedAttentionHeadsParams",
    "NormParams",
    "OpParams",
    "OpSpec",
    "Problem",
    "Site",
    "SwiGLUParams",
    "TiedHeadParams",
    "TiedWeight",
    "n_inputs",
]
