"""A VNode's state as a safetensors object: its weights (in their own dtype) and its optimizer state
(and diloco's outer state when the session has one), written and read tensor by tensor.

One object per VNode, so a checkpoint written by one placement loads into any other. `write_vnode`
streams the state from where it lives (views, no copy) into a file; `load_vnode` takes a lazy mapping
(`read_vnode` of a file) and reads one parameter's weight and state at a time, so neither ever holds a
whole VNode's state a second time (`safetensors_stream`).
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from typing import BinaryIO

import torch

from .diloco import OuterOptimizer
from .optimizer import VNodeOptimizer
from .safetensors_stream import SafetensorsError, SafetensorsFile, write
from .vnode_runtime import VNodeRuntime

PARAM, OPTIM = "param/", "optim/"


class CheckpointError(ValueError):
    pass


def _vnode_params(runtime: VNodeRuntime, vid: str) -> dict[str, torch.nn.Parameter]:
    return {f"{vid}.{name}": p for name, p in runtime.modules[vid].named_parameters()}


def write_vnode(out: BinaryIO, runtime: VNodeRuntime, optimizer: VNodeOptimizer, vid: str,
                outer: OuterOptimizer | None = None) -> int:
    """Write VNode `vid`'s object to `out`; the bytes written. On the compute thread, before any update:
    the tensors are views of the live state."""
    params = _vnode_params(runtime, vid)
    tensors = {PARAM + name: p.detach() for name, p in params.items()}
    tensors.update({OPTIM + k: v for k, v in optimizer.state_dict(sorted(params), copy=False).items()})
    if outer is not None:
        tensors.update(outer.state_dict(sorted(params)))
    # One metadata key only: the same state must give the same bytes (and digest) whoever writes it.
    # The step is in the object's name and event.
    return write(out, tensors, metadata={"vnode": vid})


def weights_object(vid: str, module: torch.nn.Module) -> bytes:
    """A VNode's object with its weights and no optimizer state: a new session's first weights."""
    out = io.BytesIO()
    write(out, {f"{PARAM}{vid}.{name}": p.detach() for name, p in module.named_parameters()}, metadata={"vnode": vid})
    return out.getvalue()


def read_vnode(vid: str, file: BinaryIO) -> SafetensorsFile:
    """VNode `vid`'s object in `file`, its tensors read when `load_vnode` asks for them."""
    try:
        return SafetensorsFile(file)
    except SafetensorsError as exc:
        raise CheckpointError(f"checkpoint of {vid} is not readable safetensors: {exc}") from None


def load_vnode(runtime: VNodeRuntime, optimizer: VNodeOptimizer, vid: str, tensors: Mapping[str, torch.Tensor],
               weights_only: bool = False, outer: OuterOptimizer | None = None) -> None:
    """Load one VNode's state in place, a parameter at a time (each tensor of `tensors` is read once);
    `weights_only` keeps the optimizer's moments and step as they are (fresh, for a new session's first
    weights) and takes the fp32 masters from the saved weights. diloco's `outer` state comes from the
    object too (anchored at the loaded weights when it has none)."""
    params = _vnode_params(runtime, vid)
    missing = [n for n in params if PARAM + n not in tensors]
    if missing:
        raise CheckpointError(f"checkpoint of {vid} lacks {', '.join(missing)}")
    try:
        for name, p in params.items():
            _load_parameter(name, p, tensors, optimizer, weights_only)
            if outer is not None:
                outer.load_state_dict([name], tensors)
    except SafetensorsError as exc:
        raise CheckpointError(f"checkpoint of {vid} is not readable safetensors: {exc}") from None


@torch.no_grad()
def _load_parameter(name: str, p: torch.nn.Parameter, tensors: Mapping[str, torch.Tensor], optimizer: VNodeOptimizer,
                    weights_only: bool) -> None:
    saved = tensors[PARAM + name]
    if saved.shape != p.shape:
        raise CheckpointError(f"checkpoint of {name} has shape {list(saved.shape)}, the network needs {list(p.shape)}")
    p.copy_(saved.to(p.dtype))  # copy, never rebind: optimizers may hold views of p
    if weights_only:  # the saved master is the more precise copy of a low-precision weight, when there is one
        master = f"{OPTIM}{name}.master"
        optimizer.load_state_dict({f"{name}.master": (tensors[master] if master in tensors else saved).float()})
        return
    del saved
    own = f"{OPTIM}{name}."
    optimizer.load_state_dict({k[len(OPTIM):]: tensors[k] for k in tensors if k.startswith(own)})
