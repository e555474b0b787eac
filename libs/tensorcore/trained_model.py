"""A committed checkpoint as one model in one process, for inference: generation and export.

The checkpoint is one safetensors object per VNode of the topology the session ran (heads fused
or not). Here it becomes the weights of the network's *fused* form (every fusable group of
attention-head VNodes as one `fused_attention_heads` VNode: the same math, fewer modules), in
fp32 whatever precision the session trained in: the saved low-precision values upcast exactly,
and the CPU computes fp32 fastest. Optimizer state is not read.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch
from safetensors.torch import load as load_tensors
from torch import nn

from computeall.network import Graph, NetworkError, NetworkSpec, load_network
from computeall.network.head_fusion import fuse_heads

from .checkpoint import PARAM
from .head_state_mapping import StateMappingError, convert_state
from .ops import build_vnode


class ModelLoadError(ValueError):
    """The network or the checkpoint cannot make a model; the message says which part and why."""


def inference_network(network_yaml: str) -> NetworkSpec:
    """The session's network in its fused form, every VNode in fp32."""
    try:
        spec = load_network(network_yaml)
    except NetworkError as exc:
        raise ModelLoadError(f"the session's network does not load: {exc}") from None
    fused, _ = fuse_heads(spec)
    for v in fused.vnodes:
        v.precision = "fp32"
    return fused


def checkpoint_weights(spec: NetworkSpec, objects: Mapping[str, bytes]) -> dict[str, torch.Tensor]:
    """`<vnode>.<param>` -> fp32 tensor in the form of `spec`, from the checkpoint's objects (VNode id -> bytes)."""
    state: dict[str, torch.Tensor] = {}
    for vid, data in objects.items():
        try:
            tensors = load_tensors(data)
        except Exception as exc:  # safetensors raises its own error types for bad headers
            raise ModelLoadError(f"the checkpoint object of {vid} is not readable safetensors: {exc}") from None
        state.update({k: t for k, t in tensors.items() if k.startswith(PARAM)})
    try:
        state = convert_state(state, spec)
    except StateMappingError as exc:
        raise ModelLoadError(f"the checkpoint does not map onto the network: {exc}") from None
    return {k[len(PARAM):]: t.float() for k, t in state.items()}


@dataclass
class TrainedModel:
    """The VNode modules of a network with a checkpoint's weights, in graph order."""

    graph: Graph
    modules: dict[str, nn.Module]

    @classmethod
    def from_checkpoint(cls, network_yaml: str, objects: Mapping[str, bytes]) -> "TrainedModel":
        spec = inference_network(network_yaml)
        return cls.from_weights(spec, checkpoint_weights(spec, objects))

    @classmethod
    def from_weights(cls, spec: NetworkSpec, weights: Mapping[str, torch.Tensor]) -> "TrainedModel":
        model = cls.untrained(spec)
        model.load(weights)
        return model

    @classmethod
    def untrained(cls, spec: NetworkSpec) -> "TrainedModel":
        """The network's modules with placeholder weights (the seed is irrelevant: `load` overwrites them)."""
        graph = Graph(spec)
        modules: dict[str, nn.Module] = {}
        # tied VNodes point at their partner, so build the partners (embeddings) first
        for vid in sorted(graph.order, key=lambda v: graph.vnodes[v].tie is not None):
            modules[vid] = build_vnode(graph.vnodes[vid], 0, torch.device("cpu"), tied=modules)
        for m in modules.values():
            m.eval().requires_grad_(False)
        return cls(graph, {vid: modules[vid] for vid in graph.order})

    def load(self, weights: Mapping[str, torch.Tensor]) -> None:
        """Copy every parameter from `weights` (`<vnode>.<param>` -> tensor); `ModelLoadError` names one
        that is missing or shaped otherwise."""
        with torch.no_grad():
            for key, p in self.weights().items():
                if key not in weights:
                    raise ModelLoadError(f"the checkpoint has no {key}: it was not written for this network")
                if tuple(weights[key].shape) != tuple(p.shape):
                    raise ModelLoadError(
                        f"the checkpoint's {key} has shape {list(weights[key].shape)}, the network needs {list(p.shape)}"
                    )
                p.copy_(weights[key])

    @property
    def spec(self) -> NetworkSpec:
        return self.graph.spec

    def weights(self) -> dict[str, torch.Tensor]:
        """Every parameter once, named `<vnode>.<param>` (a tied weight under its owner)."""
        return {f"{vid}.{name}": p for vid, m in self.modules.items() for name, p in m.named_parameters()}
