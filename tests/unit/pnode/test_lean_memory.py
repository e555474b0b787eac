"""A PNode returns freed tensors to the OS at once only where memory matters (`lean_memory`)."""

from pathlib import Path

from computeall.network import Graph, load_network
from computeall.network.memory_model import StepShape, hosting_bytes, stage_memory_bytes
from computeall.pnode.lean_memory import TIGHT_SHARE, wants_lean_memory

TINY = (Path(__file__).parents[3] / "examples" / "networks" / "tiny-gpt.yaml").read_text()


def graph(recompute: bool = False) -> Graph:
    text = TINY.replace("\ndefaults:\n", "\ndefaults:\n  recompute: true\n", 1) if recompute else TINY
    return Graph(load_network(text))


def test_a_plan_with_room_to_spare_keeps_glibc_fast():
    g = graph()
    assert not wants_lean_memory(g, g.order, StepShape(4), room_bytes=8 << 30)


def test_a_recomputing_vnode_asks_for_lean_memory_whatever_the_room():
    g = graph(recompute=True)
    assert wants_lean_memory(g, g.order[:1], StepShape(4), room_bytes=8 << 30)


def test_a_plan_near_the_offered_memory_asks_for_it():
    g = graph()
    modelled = stage_memory_bytes(g, g.order, StepShape(4))
    assert wants_lean_memory(g, g.order, StepShape(4), room_bytes=int(modelled / TIGHT_SHARE) - 1)
    assert not wants_lean_memory(g, g.order, StepShape(4), room_bytes=int(modelled / TIGHT_SHARE) + 1)


def test_the_room_is_what_the_allocator_packs_within_the_offer_less_the_process():
    """A plan is tight against the offer less the PNode's own process, as the allocator sees it:
    an offer that would leave room enough if torch took none of it does not."""
    g = graph()
    modelled = stage_memory_bytes(g, g.order, StepShape(4))
    offered, process = int(modelled / TIGHT_SHARE) + (100 << 20), 250 << 20
    assert not wants_lean_memory(g, g.order, StepShape(4), room_bytes=offered)
    assert wants_lean_memory(g, g.order, StepShape(4), room_bytes=hosting_bytes(offered, process))
    assert hosting_bytes(100, 250) == 0
