"""The VNode graph: topological order, edges, what crosses between PNodes, init seeds."""

from __future__ import annotations

import hashlib
import heapq
from dataclasses import dataclass
from functools import cached_property

from computeall.protocol.wire import encoded_bytes

from .ops import DATA_INPUTS, OPS, OpParams, OpSpec, Site
from .schema import NetworkSpec, VNodeSpec, Wire

BYTES_PER_ELEMENT = {"fp32": 4, "bf16": 2, "fp16": 2}
# bytes of one token's `features` on the wire: int8 carries one fp32 scale per block of a token's
# features (protocol.wire); a wire never widens, so each is at most `as_computed` bytes
WIRE_TOKEN_BYTES = {
    "bf16": lambda features, as_computed: min(as_computed, 2 * features),
    "fp16": lambda features, as_computed: min(as_computed, 2 * features),
    "int8": lambda features, as_computed: min(as_computed, encoded_bytes("int8-block", "float32", [features])),
}
TOKEN_BYTES = 8  # token ids are int64 on the PNode


@dataclass(frozen=True)
class Edge:
    src: str  # a VNode id or a dataset input (data.tokens, data.targets)
    dst: str
    features: int | None  # None: token ids


class Graph:
    def __init__(self, spec: NetworkSpec) -> None:
        self.spec = spec
        self.vnodes: dict[str, VNodeSpec] = {v.id: v for v in spec.vnodes}
        self._params: dict[str, OpParams] = {}

    @cached_property
    def order(self) -> list[str]:
        """Topological order, stable: ties keep the file's order (Kahn's algorithm over file positions)."""
        indegree = {vid: sum(1 for i in v.inputs if i in self.vnodes) for vid, v in self.vnodes.items()}
        ids = [v.id for v in self.spec.vnodes]
        position = {vid: n for n, vid in enumerate(ids)}
        ready = [position[vid] for vid, d in indegree.items() if d == 0]
        heapq.heapify(ready)
        out: list[str] = []
        while ready:
            vid = ids[heapq.heappop(ready)]
            out.append(vid)
            for consumer in self.consumers(vid):
                indegree[consumer] -= 1
                if indegree[consumer] == 0:
                    heapq.heappush(ready, position[consumer])
        if len(out) != len(self.vnodes):
            raise ValueError("the network has a cycle")
        return out

    def op(self, vid: str) -> OpSpec:
        return OPS[self.vnodes[vid].op]

    def wire(self, vid: str) -> Wire:
        """The wire format on `vid`'s output edges (its activation, and the gradients of it coming
        back): its own, else the network's default."""
        return self.vnodes[vid].wire or self.spec.wire

    def params(self, vid: str) -> OpParams:
        """A VNode's parameters as its op's typed model (defaults filled in)."""
        if vid not in self._params:
            self._params[vid] = self.op(vid).params.model_validate(self.vnodes[vid].params)
        return self._params[vid]

    def consumers(self, vid: str) -> list[str]:
        """The VNodes reading `vid`, in file order (each once, however often it reads it)."""
        return self._consumers.get(vid, [])

    @cached_property
    def _consumers(self) -> dict[str, list[str]]:
        readers: dict[str, list[str]] = {}
        for v in self.spec.vnodes:
            for name in dict.fromkeys(v.inputs):
                readers.setdefault(name, []).append(v.id)
        return readers

    @cached_property
    def out_features(self) -> dict[str, int | None]:
        feats: dict[str, int | None] = {name: None for name in DATA_INPUTS}
        for vid in self.order:
            op = self.op(vid)
            if op.out_features is None:  # elementwise: as wide as its inputs
                feats[vid] = feats[self.vnodes[vid].inputs[0]]
            else:
                feats[vid] = op.out_features(self.params(vid))
        return feats

    @cached_property
    def edges(self) -> list[Edge]:
        return [Edge(src, v.id, self.out_features[src]) for v in self.spec.vnodes for src in v.inputs]

    def edge_bytes_per_step(self, edge: Edge, batch_size: int) -> int:
        """Bytes an edge carries per step when it crosses PNodes: the activation forward, its gradient back."""
        tokens = batch_size * self.spec.context
        if edge.features is None:
            return tokens * TOKEN_BYTES
        as_computed = edge.features * BYTES_PER_ELEMENT[self.vnodes[edge.src].precision]
        on_wire = WIRE_TOKEN_BYTES.get(self.wire(edge.src), lambda features, computed: computed)
        return 2 * tokens * on_wire(edge.features, as_computed)

    def edge_fp32_bytes_per_step(self, edge: Edge, batch_size: int) -> int:
        """What the edge would carry per step as fp32 on an fp32 wire (`features` x 4 bytes a token each
        way): the uncompressed figure the dashboard sets `edge_bytes_per_step` against."""
        if edge.features is None:
            return batch_size * self.spec.context * TOKEN_BYTES  # token ids are not compressed
        return 2 * batch_size * self.spec.context * edge.features * BYTES_PER_ELEMENT["fp32"]

    def site(self, vid: str) -> Site:
        """Where `vid` sits, as the op's cost models see it (the sequence length, its output width)."""
        return Site(context=self.spec.context, features=self.out_features[vid] or 1)

    def flops_per_token(self, vid: str) -> float:
        """Forward+backward FLOPs per token of `vid`, from its op's model in the registry."""
        return self.op(vid).flops_per_token(self.params(vid), self.site(vid))

    def param_count(self, vid: str) -> int:
        return self.op(vid).param_count(self.params(vid))

    def tie_groups(self) -> list[set[str]]:
        """Sets of VNodes that share a weight and so must live on one PNode."""
        groups: dict[str, set[str]] = {}
        for v in self.spec.vnodes:
            if v.tie:
                groups.setdefault(v.tie, {v.tie}).add(v.id)
        return list(groups.values())


def init_seed(session_seed: int, vnode_id: str) -> int:
    """The seed of a VNode's parameter init: a function of the session seed and the VNode id only,
    so where a VNode lives never changes its weights."""
    h = hashlib.blake2b(f"{session_seed}:{vnode_id}".encode(), digest_size=8).digest()
    return int.from_bytes(h, "little") & ((1 << 63) - 1)
