"""When a PNode hands freed tensors back to the OS at once (`map_large_allocations`).

With glibc's default, the holes a step's temporaries leave between kept activations stay resident:
on the seed network a PNode's peak RSS stands 200-300 MiB above what it needs. Mapping every large
tensor on its own gives that back, but each new tensor then faults its pages in: a seed-network
step takes about 15% longer on this CPU (docs/decisions.md). So a PNode pays it only where memory
is what matters:
- it hosts a VNode that recomputes: its user traded compute for memory already;
- or the allocator's model of what it hosts (`vnode_memory_bytes`) takes more than `TIGHT_SHARE`
  of the room its offer leaves for VNodes (`hosting_bytes`, what the allocator packs within): the
  model does not count backward's working memory, and glibc's holes come on top.
It is one way: once set, glibc's threshold stays fixed for the life of the process.
"""

from __future__ import annotations

from computeall.network import Graph
from computeall.network.memory_model import vnode_memory_bytes

TIGHT_SHARE = 0.25


def wants_lean_memory(graph: Graph, local: list[str], micro_batch_size: int, room_bytes: int) -> bool:
    if any(graph.vnodes[v].recompute for v in local):
        return True
    modelled = sum(vnode_memory_bytes(graph, v, micro_batch_size) for v in local)
    return modelled > TIGHT_SHARE * room_bytes
