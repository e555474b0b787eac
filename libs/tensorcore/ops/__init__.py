"""VNode op implementations as torch modules, and `build_vnode` that makes one from its spec.

Which module implements an op is the op's registry entry (`computeall.network.ops.OPS`), by
dotted path; `module_class` resolves it here, on the PNode side, so the registry stays torch-free.
"""

from __future__ import annotations

import importlib
from functools import lru_cache

import torch

from computeall.network import VNodeSpec, init_seed
from computeall.network.ops import OPS

from ..precision import DTYPES


@lru_cache(maxsize=None)
def resolve_module(path: str) -> type[torch.nn.Module]:
    """Resolve "package.module:Class" to the class, which must be a torch module."""
    module_name, _, class_name = path.partition(":")
    try:
        cls = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"op module {path!r} does not resolve ({exc}); fix the op's `module` in its registry entry") from None
    if not (isinstance(cls, type) and issubclass(cls, torch.nn.Module)):
        raise ValueError(f"op module {path!r} is not a torch.nn.Module subclass")
    return cls


def module_class(op: str) -> type[torch.nn.Module]:
    """The torch module that implements `op`."""
    return resolve_module(OPS[op].module)


def build_vnode(
    spec: VNodeSpec,
    session_seed: int,
    device: torch.device,
    tied: dict[str, torch.nn.Module] | None = None,
    init: bool = True,
) -> torch.nn.Module:
    """Build a VNode's module with its parameters initialised from (session seed, VNode id) only.

    `tied` maps VNode ids to already built modules, for ops that share another VNode's weight.
    `init=False` leaves the parameters as the module's constructor made them (maybe uninitialised), for
    a caller that overwrites every one (a spot check loads the host's): seeded init is most of a build.
    """
    cls = module_class(spec.op)
    generator = torch.Generator().manual_seed(init_seed(session_seed, spec.id))
    dtype = DTYPES[spec.precision]
    if spec.tie:
        if not tied or spec.tie not in tied:
            raise ValueError(f"vnode {spec.id!r} ties to {spec.tie!r}, which must live on the same PNode")
        module = cls(**spec.params, weight=tied[spec.tie].weight)
    else:
        module = cls(**spec.params)
        from_parts = getattr(module, "reset_parameters_from", None)
        if init and from_parts is not None:  # fused from several VNodes: each part starts from its own VNode's seed
            from_parts(generator, lambda vid: torch.Generator().manual_seed(init_seed(session_seed, vid)), spec.id)
        elif init:
            module.reset_parameters(generator)  # on the CPU, so every device starts from the same numbers
    return module.to(device=device, dtype=dtype)
