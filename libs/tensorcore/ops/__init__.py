"""VNode op implementations as torch modules, and `build_vnode` that makes one from its spec."""

from __future__ import annotations

import torch

from computeall.network import VNodeSpec, init_seed

from ..precision import DTYPES
from .add import Add
from .attention import Attention
from .attention_head import AttentionHead
from .concat_heads import ConcatHeads
from .embedding import Embedding
from .fused_heads import FusedAttentionHeads
from .norms import LayerNorm, RMSNorm
from .swiglu import SwiGLU
from .tied_head import TiedLMHeadCE

MODULES = {
    "embedding": Embedding,
    "rmsnorm": RMSNorm,
    "layernorm": LayerNorm,
    "attention": Attention,
    "swiglu_mlp": SwiGLU,
    "add": Add,
    "tied_lm_head_ce": TiedLMHeadCE,
    "attention_head": AttentionHead,
    "concat_heads": ConcatHeads,
    "fused_attention_heads": FusedAttentionHeads,
}


def build_vnode(
    spec: VNodeSpec,
    session_seed: int,
    device: torch.device,
    tied: dict[str, torch.nn.Module] | None = None,
) -> torch.nn.Module:
    """Build a VNode's module with its parameters initialised from (session seed, VNode id) only.

    `tied` maps VNode ids to already built modules, for ops that share another VNode's weight.
    """
    cls = MODULES[spec.op]
    generator = torch.Generator().manual_seed(init_seed(session_seed, spec.id))
    dtype = DTYPES[spec.precision]
    if spec.tie:
        if not tied or spec.tie not in tied:
            raise ValueError(f"vnode {spec.id!r} ties to {spec.tie!r}, which must live on the same PNode")
        module = cls(**spec.params, weight=tied[spec.tie].weight)
    else:
        module = cls(**spec.params)
        from_parts = getattr(module, "reset_parameters_from", None)
        if from_parts is not None:  # fused from several VNodes: each part starts from its own VNode's seed
            from_parts(generator, lambda vid: torch.Generator().manual_seed(init_seed(session_seed, vid)))
        else:
            module.reset_parameters(generator)  # on the CPU, so every device starts from the same numbers
    return module.to(device=device, dtype=dtype)
