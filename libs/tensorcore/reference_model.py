"""Our VNode modules as one torch module in one process: same init (seeded per VNode), ordinary autograd.

A correctness check for what rewrites our own graph or runs it in pieces (head fusion, clipping,
precision casts, the local step), where the question is "the same as our ops in one piece". It is
built from the same op modules as the PNodes, so it cannot catch a bug in an op: the distributed run
is checked against torch's own modules for that (`plain_gpt`, tests/integration/test_equivalence.py).
"""

from __future__ import annotations

import torch
from torch import nn

from computeall.network import Graph
from computeall.network.ops import OPS

from computeall.protocol.config import DecayGroup

from .ops import build_vnode
from .param_groups import decay_groups
from .precision import cast_input, dtype_of


class ReferenceModel(nn.Module):
    def __init__(self, graph: Graph, session_seed: int, device: torch.device | str = "cpu") -> None:
        super().__init__()
        self.graph = graph
        built: dict[str, nn.Module] = {}
        for vid in sorted(graph.order, key=lambda v: graph.vnodes[v].tie is not None):
            built[vid] = build_vnode(graph.vnodes[vid], session_seed, torch.device(device), tied=built)
        self.vnodes = nn.ModuleDict({vid.replace(".", "/"): built[vid] for vid in graph.order})

    def vnode_parameters(self) -> dict[str, dict[str, nn.Parameter]]:
        """Each VNode's own parameters by name, in graph order (a tied weight under its owner)."""
        return {vid: dict(self.vnodes[vid.replace(".", "/")].named_parameters()) for vid in self.graph.order}

    def named_vnode_parameters(self) -> dict[str, nn.Parameter]:
        """Parameters named `<vnode>.<param>` like a PNode names them."""
        return {f"{vid}.{name}": p for vid, named in self.vnode_parameters().items() for name, p in named.items()}

    def decay_groups(self) -> dict[str, DecayGroup]:
        """Every parameter's weight-decay group, named as in `named_vnode_parameters()`."""
        return decay_groups(self.graph, self.vnode_parameters())

    def forward(self, tokens: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """The summed loss of every loss VNode over the batch."""
        values: dict[str, torch.Tensor] = {"data.tokens": tokens, "data.targets": targets}
        total = torch.zeros((), device=tokens.device)
        for vid in self.graph.order:
            spec = self.graph.vnodes[vid]
            dtype = dtype_of(spec.precision)  # each VNode casts its inputs to its own precision, as on a PNode
            out = self.vnodes[vid.replace(".", "/")](*(cast_input(values[i], dtype) for i in spec.inputs))
            if OPS[spec.op].is_loss:
                total = total + out
            else:
                values[vid] = out
        return total
