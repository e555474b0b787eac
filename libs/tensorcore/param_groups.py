"""Weight-decay groups: which parameters decay, decided by what they are, not by their shape alone.

As in nanoGPT and torchtitan, matrices of layers decay and biases, norms and embeddings (the tied
LM head's weight is its embedding) do not, by default; `OptimizerConfig.no_decay` names the groups
that do not. A parameter's group comes from its op's registry entry (`OpSpec.decay_group`), so
the PNodes and the single-process reference model group every parameter the same way.
"""

from __future__ import annotations

from torch import nn

from computeall.network import Graph
from computeall.protocol.config import DecayGroup


def decay_groups(graph: Graph, params: dict[str, dict[str, nn.Parameter]]) -> dict[str, DecayGroup]:
    """{`<vnode>.<param>`: its group} for `params` ({vnode: {param name: parameter}})."""
    return {
        f"{vid}.{name}": graph.op(vid).decay_group(p.ndim)
        for vid, named in params.items()
        for name, p in named.items()
    }
