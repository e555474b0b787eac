"""The op registry: one entry per VNode op, without torch.

Each entry (`OpSpec`, one small file per op here) declares the op's YAML parameters, how many
inputs it reads and how wide they are, the width of its output, its parameter count, its
shape check, its FLOPs and activation-memory models, the torch module that implements it
(by dotted path), how sampling runs it (`generation`) and its part in a Hugging Face Llama (`llama`). Validation (`loader`), the graph, the allocator and `computeall.tensorcore`
all read `OPS`; nothing else in the code branches on an op's name.

Adding an op: a file here that defines its params model and `OP = OpSpec(...)`, its name in
`OPS` below, and its torch module in `libs/tensorcore/ops/`.
"""

from . import (add, attention, attention_head, bottleneck, concat_heads, embedding, fused_heads, lm_head, norms, swiglu,
               tied_head, vocab_shards)
from .add import AddParams
from .attention import AttentionParams
from .attention_head import AttentionHeadParams
from .bottleneck import BottleneckParams
from .concat_heads import ConcatHeadsParams
from .embedding import EmbeddingParams
from .fused_heads import FusedAttentionHeadsParams
from .lm_head import LMHeadParams
from .norms import NormParams
from .spec import DATA_INPUTS, Generation, LlamaPart, OpParams, OpSpec, Problem, Site, TiedWeight, catalogue, n_inputs
from .swiglu import SwiGLUParams
from .tied_head import TiedHeadParams
from .vocab_shards import STATS, ShardParams, VocabParams

OPS: dict[str, OpSpec] = catalogue(
    embedding.OP,
    norms.RMSNORM,
    norms.LAYERNORM,
    attention.OP,
    swiglu.OP,
    add.OP,
    tied_head.OP,
    lm_head.OP,
    vocab_shards.EMBEDDING_SHARD,
    vocab_shards.EMBEDDING_GATHER,
    vocab_shards.LM_HEAD_SHARD,
    vocab_shards.SHARDED_CE,
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
    "Generation",
    "LMHeadParams",
    "LlamaPart",
    "NormParams",
    "OpParams",
    "OpSpec",
    "Problem",
    "STATS",
    "ShardParams",
    "Site",
    "SwiGLUParams",
    "TiedHeadParams",
    "TiedWeight",
    "VocabParams",
    "n_inputs",
]
