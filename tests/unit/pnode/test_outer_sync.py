"""diloco's outer sync on the PNode side, replicas wired in memory through real tensor frames: the
sparse sync leaves every replica with the same anchor in exactly the bytes of its messages, an
overlapped one lands later without waiting meanwhile, and a partner's frames are admitted for as
long as the sync may travel, no larger than its messages."""

import asyncio

import pytest
import torch

from computeall.pnode.admission import Admission, LateFrame
from computeall.pnode.member import InputsNeverCame
from computeall.pnode.routing import TensorRoute
from computeall.protocol import wire
from computeall.protocol.replica_sync import ReplicaSync, SparseCompression
from computeall.tensorcore.local_step import local_step

from ..tensorcore.helpers import batch, tiny_graph
from .test_replica_sum import Wired, plans

SPARSE = SparseCompression(top_k=1 / 16, chunk=1024)
HEADER = 512  # a frame's header, at most


def train(wired: Wired, steps: range) -> None:
    graph = wired.runtimes[0].graph
    for r, (runtime, optimizer) in enumerate(zip(wired.runtimes, wired.optimizers)):
        for step in steps:
            local_step(runtime, [batch(graph, n=2, seed=100 * r + step)])
            optimizer.step(1e-2)
            runtime.zero_grad()


async def after_update(wired: Wired, step: int) -> list[int]:
    for s in wired.sums:
        s.begin(step, deadline_s=30)
    return await asyncio.gather(*(s.outer_step(step, deadline_s=30) for s in wired.sums))


def masters(wired: Wired, r: int) -> dict[str, torch.Tensor]:
    return {n: m.clone() for n, m in wired.sums[r].outer.masters.items()}


@pytest.mark.parametrize("replicas", [2, 4])
def test_a_sparse_sync_leaves_every_replica_with_the_same_parameters_in_its_messages_bytes(replicas):
    graph = tiny_graph()
    wired = Wired(graph, replicas, ReplicaSync(mode="diloco", inner_steps=2, compression=SPARSE))
    train(wired, range(2))
    before = masters(wired, 0)
    sent = asyncio.run(after_update(wired, 1))

    params = [masters(wired, r) for r in range(replicas)]
    for name in params[0]:
        assert all(torch.equal(p[name], params[0][name]) for p in params), name
    assert any(not torch.equal(params[0][n], before[n]) for n in before)
    owned = wired.runtimes[0].gradients.owned
    messages = [SPARSE.layout(sum(wired.runtimes[0].parameters()[n].numel() for n in names)).message_bytes
                for names in owned.values() if names]
    # each replica sends every other replica's message once, over log2(R) levels, one frame per level
    levels = replicas.bit_length() - 1
    least = (replicas - 1) * sum(messages)
    assert len(set(sent)) == 1 and least < sent[0] <= least + levels * len(messages) * HEADER, (sent, least)
    assert all(e.any() for e in wired.sums[0].outer.error.values()), "what was not sent is kept"
    assert not torch.equal(wired.sums[0].outer.error[next(iter(before))],
                           wired.sums[1].outer.error[next(iter(before))]), "each replica keeps its own error"


def test_an_overlapped_sync_lands_after_the_overlap_with_what_each_replica_learned_meanwhile():
    graph = tiny_graph()
    wired = Wired(graph, 2, ReplicaSync(mode="diloco", inner_steps=4, overlap_steps=2, compression=SPARSE))
    train(wired, range(4))
    started = [masters(wired, r) for r in range(2)]

    async def steps() -> list[int]:  # one event loop: the sync travels while the next steps run
        assert await after_update(wired, 3) == [0, 0], "nothing is counted before it lands"
        assert all(torch.equal(masters(wired, r)[n], started[r][n]) for r in range(2) for n in started[r])
        train(wired, range(4, 5))
        assert await after_update(wired, 4) == [0, 0]
        train(wired, range(5, 6))
        learned.extend({n: masters(wired, r)[n] - started[r][n] for n in started[r]} for r in range(2))
        return await after_update(wired, 5)

    learned: list[dict[str, torch.Tensor]] = []
    sent = asyncio.run(steps())
    assert sent[0] == sent[1] > 0
    anchors = [wired.sums[r].outer.anchor for r in range(2)]
    for n in anchors[0]:
        assert torch.equal(anchors[0][n], anchors[1][n]), n
        for r in range(2):  # the new anchor plus the replica's own inner steps since the sync started
            torch.testing.assert_close(masters(wired, r)[n], anchors[r][n] + learned[r][n], rtol=0, atol=1e-6)


def test_a_sync_whose_partner_never_answers_gives_up_where_it_lands_as_starved():
    """Answered `starved` (the orchestrator stalls the step and allows longer), not a failed session."""
    graph = tiny_graph()
    wired = Wired(graph, 2, ReplicaSync(mode="diloco", inner_steps=2, overlap_steps=1, compression=SPARSE))
    train(wired, range(2))

    async def alone():
        wired.sums[0].begin(1, deadline_s=30)
        assert await wired.sums[0].outer_step(1, deadline_s=30) == 0  # started: it travels while the next step runs
        wired.sums[0].begin(2, deadline_s=30)
        await wired.sums[0].outer_step(2, deadline_s=0.5)  # the ApplyStep's own deadline, not the pass's

    with pytest.raises(InputsNeverCame, match="the outer sync of embed .* did not arrive from the other replica in time"):
        asyncio.run(alone())


def test_a_partners_outer_sync_is_admitted_while_it_may_travel_and_no_larger_than_its_messages():
    graph = tiny_graph()
    sync = ReplicaSync(mode="diloco", inner_steps=4, overlap_steps=2, compression=SPARSE)
    plan = plans(graph, 2, sync)[0]
    admission = Admission(plan, graph, "p0")
    embed = SPARSE.layout(graph.param_count("embed")).message_bytes

    def frame(step: int, nbytes: int = embed) -> wire.TensorHeader:
        route = TensorRoute.outer_sync("s", step, "embed", 2, 4)
        return wire.decode_frame(wire.encode(route.wire_key, "uint8", [nbytes], bytes(nbytes), 1 << 20,
                                             route.wire_meta())[0])[0]

    admission.running(5)  # step 5 runs: the sync of step 3 may still travel (it lands after step 5)
    assert admission.admit("p1", frame(3)).kind == "outer"
    with pytest.raises(LateFrame, match="came late"):
        admission.admit("p1", frame(2))
    with pytest.raises(wire.WireError, match=f"claims {embed + 1} bytes; it is {embed} at most"):
        admission.admit("p1", frame(3, embed + 1))
    with pytest.raises(wire.WireError, match="comes from p1, not from p0"):
        admission.admit("p0", frame(3))
    gradients = Admission(plans(graph, 2, ReplicaSync())[0], graph, "p0")
    gradients.running(3)
    with pytest.raises(wire.WireError, match="no replica sends this PNode that sync"):
        gradients.admit("p1", frame(3))
