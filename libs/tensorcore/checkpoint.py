"""A VNode's state as safetensors bytes: its weights (in their own dtype) and its optimizer state
(and diloco's outer state when the session has one).

One object per VNode, so a checkpoint written by one placement loads into any other.
"""

from __future__ import annotations

import torch
from safetensors.torch import load as load_tensors
from safetensors.torch import save as save_tensors

from .diloco import OUTER, OuterOptimizer
from .optimizer import VNodeOptimizer
from .vnode_runtime import VNodeRuntime

PARAM, OPTIM = "param/", "optim/"


class CheckpointError(ValueError):
    pass


def _vnode_params(runtime: VNodeRuntime, vid: str) -> dict[str, torch.nn.Parameter]:
    return {f"{vid}.{name}": p for name, p in runtime.modules[vid].named_parameters()}


def save_vnode(runtime: VNodeRuntime, optimizer: VNodeOptimizer, vid: str,
               outer: OuterOptimizer | None = None) -> bytes:
    params = _vnode_params(runtime, vid)
    tensors = {PARAM + name: p.detach().contiguous().cpu() for name, p in params.items()}
    # views, not copies: serialized here at once, on the compute thread, before any update
    tensors.update({OPTIM + k: v.contiguous().cpu() for k, v in optimizer.state_dict(sorted(params), copy=False).items()})
    if outer is not None:
        tensors.update({k: v.contiguous().cpu() for k, v in outer.state_dict(sorted(params)).items()})
    # One metadata key only: safetensors writes several in a random order, and the same state must
    # give the same bytes (and digest) whoever writes it. The step is in the object's name and event.
    return save_tensors(tensors, metadata={"vnode": vid})


def weights_object(vid: str, module: torch.nn.Module) -> bytes:
    """A VNode's object with its weights and no optimizer state: a new session's first weights."""
    tensors = {f"{PARAM}{vid}.{name}": p.detach().contiguous().cpu() for name, p in module.named_parameters()}
    return save_tensors(tensors, metadata={"vnode": vid})


def load_vnode(runtime: VNodeRuntime, optimizer: VNodeOptimizer, vid: str, data: bytes, weights_only: bool = False,
               outer: OuterOptimizer | None = None) -> None:
    """Load one VNode's state in place; `weights_only` keeps the optimizer's moments and step as they are
    (fresh, for a new session's first weights) and takes the fp32 masters from the saved weights. diloco's
    `outer` state comes from the object too (anchored at the loaded weights when it has none)."""
    try:
        tensors = load_tensors(data)
    except Exception as exc:  # safetensors raises its own error types for bad headers
        raise CheckpointError(f"checkpoint of {vid} is not readable safetensors: {exc}") from None
    params = _vnode_params(runtime, vid)
    missing = [n for n in params if PARAM + n not in tensors]
    if missing:
        raise CheckpointError(f"checkpoint of {vid} lacks {', '.join(missing)}")
    with torch.no_grad():
        for name, p in params.items():
            saved = tensors[PARAM + name]
            if saved.shape != p.shape:
                raise CheckpointError(f"checkpoint of {name} has shape {list(saved.shape)}, the network needs {list(p.shape)}")
            p.copy_(saved.to(p.dtype))  # copy, never rebind: optimizers may hold views of p
    optim = {k[len(OPTIM) :]: v for k, v in tensors.items() if k.startswith(OPTIM)}
    if weights_only:  # the saved master is the more precise copy of a low-precision weight, when there is one
        optim = {f"{n}.master": optim.get(f"{n}.master", tensors[PARAM + n]).float() for n in params}
    optimizer.load_state_dict(optim)
    if outer is not None:
        outer.load_state_dict(sorted(params), {k: v for k, v in tensors.items() if k.startswith(OUTER)})

