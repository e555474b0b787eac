"""When a PNode hands freed tensors back to the OS at once (`map_large_allocations`).

With glibc's default, the holes a step's temporaries leave between kept activations stay resident:
on the seed network a PNode's peak RSS stands 200-300 MiB above what it needs. Mapping every large
tensor on its own gives that back, but each new tensor then faults its pages in: a seed-network
step takes about 15% longer on this CPU (docs/decisions.md). So a PNode pays it only where memory
is what matters:
- it hosts a VNode that recomputes: its user traded compute for memory already;
- or the allocator's model of what it hosts (`stage_memory_bytes`) takes more than `TIGHT_SHARE`
  of the room its offer leaves for VNodes (`hosting_bytes`, what the allocator packs within):
  glibc's holes come on top of the live bytes the model counts.
It is one way: once set, glibc's threshold stays fixed for the life of the process. A lean stage
also computes a sharded LM head's tied gradient when its embedding's backward comes
(`VNodeRuntime.defer_tied_gradients`): one more logits product a chunk, the same bits.
"""

from __future__ import annotations

from computeall.network import Graph
from computeall.network.memory_model import StepShape, stage_memory_bytes

TIGHT_SHARE = 0.25


def wants_lean_memory(graph: Graph, local: list[str], shape: StepShape, room_bytes: int) -> bool:
    if any(graph.vnodes[v].recompute for v in local):
        return True
    return stage_memory_bytes(graph, local, shape) > TIGHT_SHARE * room_bytes
