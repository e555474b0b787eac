"""A replica's PNodes tell each other their gradients' squared norms (diloco's `inner_decisions: own`):
each ends with every VNode's value exactly as computed, so each decides the clip the orchestrator's
rule gives for the whole replica; an overflow anywhere skips the step everywhere in it; what is not
a vector of float64 bits is dropped; a norm that never comes is named."""

from __future__ import annotations

import math

import pytest
import torch

from computeall.pnode.member import InputsNeverCame
from computeall.pnode.replica_norms import ReplicaNorms
from computeall.pnode.routing import TensorRoute
from computeall.protocol import clipping
from computeall.protocol.pnode_api import PNodeReply

from .test_admission import GRAPH, ON_A, plan

NORMS_A = {"embed": 0.1 + 1e-17, "b0.attn": 2.0 / 3.0}  # digits a float32 would lose
NORMS_B = {"b1.attn": 1.0 / 7.0, "norm_f": 3e-9}


def replica() -> dict[str, ReplicaNorms]:
    """PNodes a and b of one replica, each delivering what it puts in its outbox to the other at once."""
    nodes = {p: ReplicaNorms(plan(), p, GRAPH.order, link=None) for p in ("a", "b")}
    for node in nodes.values():
        node.outbox.put = lambda peer, encoded, route: nodes[peer].receive(route, encoded.decode())
    return nodes


async def test_each_pnode_decides_the_replicas_clip_from_every_vnodes_norm():
    nodes = replica()
    nodes["a"].share(3, NORMS_A)
    nodes["b"].share(3, NORMS_B)
    whole = clipping.decide([PNodeReply(ok=True, pnode="a", grad_sq_norms=NORMS_A),
                             PNodeReply(ok=True, pnode="b", grad_sq_norms=NORMS_B)], 0.5)
    for pnode, own in (("a", NORMS_A), ("b", NORMS_B)):
        values = await nodes[pnode].gathered(3, own, deadline_s=1.0)
        assert sorted(values) == sorted([*NORMS_A.values(), *NORMS_B.values()]), "bit for bit"
        assert clipping.clip(values, 0.5) == whole and whole.clipped


async def test_an_overflow_on_one_pnode_skips_the_step_on_every_pnode_of_the_replica():
    nodes = replica()
    nodes["a"].share(3, None)
    nodes["b"].share(3, NORMS_B)
    assert clipping.clip(await nodes["b"].gathered(3, NORMS_B, deadline_s=1.0), 0.5).skip
    assert math.isnan((await nodes["a"].gathered(3, None, deadline_s=1.0))[0])


async def test_norms_that_are_not_float64_bits_are_dropped_and_a_missing_one_is_named():
    nodes = replica()
    first_of_a = next(v for v in GRAPH.order if v in ON_A)
    nodes["b"].outbox.put = lambda *_: None
    nodes["b"].receive(TensorRoute.norms("s1", 3, 0, first_of_a), torch.ones(2, dtype=torch.float32))
    with pytest.raises(InputsNeverCame, match="step 3: the gradient norms of a did not come within 0.2s"):
        await nodes["b"].gathered(3, NORMS_B, deadline_s=0.2)
