"""A PNode's whole VNode set as one safetensors blob: weights in their own dtypes plus optimizer state.

`save_state` / `load_state` are pure functions over bytes; the digest (blake2b-128 of the tensor
payload, in the metadata) catches a torn or altered blob before anything is loaded. Per-VNode
objects for checkpoints are in `checkpoint.py`; both use the optimizer's flat state_dict.
"""

from __future__ import annotations

import hashlib
import json
import struct

import torch
from safetensors.torch import load as load_tensors
from safetensors.torch import save as save_tensors

from .optimizer import VNodeOptimizer
from .vnode_runtime import VNodeRuntime

PARAM, OPTIM = "param/", "optim/"


class StateError(ValueError):
    pass


def _digest(tensors: dict[str, torch.Tensor]) -> str:
    h = hashlib.blake2b(digest_size=16)
    for name in sorted(tensors):
        t = tensors[name].contiguous()
        h.update(f"{name}:{str(t.dtype)}:{list(t.shape)};".encode())
        h.update(t.view(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


def save_state(runtime: VNodeRuntime, optimizer: VNodeOptimizer) -> bytes:
    tensors = {PARAM + n: p.detach().contiguous().cpu() for n, p in runtime.parameters().items()}
    tensors.update({OPTIM + k: v.contiguous().cpu() for k, v in optimizer.state_dict().items()})
    return save_tensors(tensors, metadata={"digest": _digest(tensors)})


def load_state(runtime: VNodeRuntime, optimizer: VNodeOptimizer, data: bytes) -> None:
    """Load in place (copying into the parameters, which the optimizer holds as views)."""
    try:
        tensors = load_tensors(data)
        (header_len,) = struct.unpack("<Q", data[:8])
        meta = json.loads(data[8 : 8 + header_len]).get("__metadata__", {})
    except Exception as exc:  # safetensors raises its own error types for bad headers
        raise StateError(f"not readable safetensors: {exc}") from None
    if meta.get("digest") != _digest(tensors):
        raise StateError("state digest does not match its tensors")
    params = runtime.parameters()
    for name, p in params.items():
        saved = tensors.get(PARAM + name)
        if saved is None:
            raise StateError(f"state lacks {name}")
        if saved.shape != p.shape:
            raise StateError(f"state of {name} has shape {list(saved.shape)}, the network needs {list(p.shape)}")
    with torch.no_grad():
        for name, p in params.items():
            p.copy_(tensors[PARAM + name].to(p.dtype))
    optimizer.load_state_dict({k[len(OPTIM):]: v for k, v in tensors.items() if k.startswith(OPTIM)})
