"""A PNode accepts a tensor frame only from the PNode its plan names as that tensor's producer, for a
step and micro-batch it expects, within the tensor's size; the reason of every refusal says what was
wrong. Frames are made as the wire makes them; the checks run before anything is allocated."""

from __future__ import annotations

import struct
import tracemalloc
from types import SimpleNamespace

import pytest
import torch

from computeall.cli.security.roles import permissions
from computeall.pnode.admission import Admission, LateFrame
from computeall.pnode.checks import CheckInbox, Part
from computeall.pnode.transport import Inbound
from computeall.pnode.routing import CheckPartRoute, TensorRoute
from computeall.protocol import wire
from computeall.protocol.config import OptimizerConfig
from computeall.protocol.limits import TENSORS_PENDING_PER_SENDER
from computeall.protocol.pnode_api import BatchSource, LoadPlan, ReplicaPlan
from computeall.protocol.replica_sync import ReplicaSync
from computeall.protocol.subjects import Subjects

from ..tensorcore.helpers import tiny_graph

S = Subjects("ca")
GRAPH = tiny_graph()
ON_A = {"embed", "head", "b0.norm1", "b0.attn", "b0.res1", "b0.norm2", "b0.mlp", "b0.res2"}
MICRO_BATCH, CONTEXT, DIM = 2, GRAPH.spec.context, 32
ACTIVATION_BYTES = MICRO_BATCH * CONTEXT * DIM * 4  # one micro-batch of a block's output, fp32


def assignment(a: str = "a", b: str = "b") -> dict[str, str]:
    return {v: a if v in ON_A else b for v in GRAPH.order}


def plan(replicas: int = 1, index: int = 0, verify: bool = False, micro_batches: int = 4,
         sync: ReplicaSync | None = None) -> LoadPlan:
    assignments = [assignment(f"a{r}", f"b{r}") if replicas > 1 else assignment() for r in range(replicas)]
    return LoadPlan(
        session_id="s1", network=GRAPH.spec.model_dump(), assignment=assignments[index], seed=0,
        batches=BatchSource(dataset="d", split="train", seed=0, micro_batch_size=MICRO_BATCH, context=CONTEXT),
        micro_batches=micro_batches, optimizer=OptimizerConfig(), verify=verify,
        replicas=ReplicaPlan(index=index, assignments=assignments, sync=sync or ReplicaSync()) if replicas > 1 else None,
    )


def header(route: TensorRoute | CheckPartRoute, nbytes: int = ACTIVATION_BYTES, key: str | None = None,
           chunk_bytes: int = 1 << 20) -> wire.TensorHeader:
    frame = frames(route, nbytes, key, chunk_bytes)[0]
    return wire.decode_frame(frame)[0]


def frames(route, nbytes: int = ACTIVATION_BYTES, key: str | None = None, chunk_bytes: int = 1 << 20,
           fill: int = 0) -> list[bytes]:
    return wire.encode(key or route.wire_key, "uint8", [nbytes], bytes([fill]) * nbytes, chunk_bytes, route.wire_meta())


def act(step: int = 0, micro: int = 0, src: str = "b0.res2", phase: str = "train") -> TensorRoute:
    return TensorRoute.activation("s1", phase, step, micro, src)


def on_b(**kwargs) -> Admission:
    return Admission(plan(**kwargs), GRAPH, "b")


def test_an_activation_is_accepted_from_its_producer_for_this_step_or_the_next():
    admission = on_b()
    admission.running(3)
    for step in (3, 4):
        assert admission.admit("a", header(act(step))) == act(step)
    assert admission.admit("a", header(act(4, micro=3))).micro == 3


def test_a_frame_from_another_pnode_is_refused_even_with_the_producers_route():
    with pytest.raises(wire.WireError, match=r"the output of b0.res2 \(train step 0, micro-batch 0\) comes from a, not from rogue"):
        on_b().admit("rogue", header(act()))


def test_a_frame_for_a_step_not_expected_is_refused_and_an_earlier_ones_is_late():
    admission = on_b()
    admission.running(5)
    with pytest.raises(wire.WireError, match=r"\(train step 7, micro-batch 0\) came too early: this PNode expects train step 6 at the latest"):
        admission.admit("a", header(act(7)))
    with pytest.raises(LateFrame, match=r"\(train step 4, micro-batch 0\) came late"):
        admission.admit("a", header(act(4)))
    admission.restored(2)  # a rollback: step 2 runs next
    assert admission.admit("a", header(act(2))).step == 2
    with pytest.raises(wire.WireError, match="expects train step 2 at the latest"):
        admission.admit("a", header(act(5)))


def test_validation_frames_are_for_the_step_after_the_last_trained_and_its_announced_micro_batches():
    admission = on_b()
    admission.running(5)
    assert admission.admit("a", header(act(6, micro=3, phase="val"))).phase == "val"
    with pytest.raises(wire.WireError, match=r"micro-batch 4\) is not for this PNode: its val passes run micro-batches 0..3"):
        admission.admit("a", header(act(6, micro=4, phase="val")))
    with pytest.raises(ValueError, match="validation of 5 micro-batches, but the plan of session s1 announced 4"):
        admission.validating(5)


def test_a_micro_batch_outside_this_replicas_block_is_refused():
    admission = Admission(plan(replicas=2, index=1), GRAPH, "b1")
    assert admission.admit("a1", header(act(micro=2))).micro == 2
    with pytest.raises(wire.WireError, match=r"micro-batch 1\) is not for this PNode: its train passes run micro-batches 2..3"):
        admission.admit("a1", header(act(micro=1)))


def test_a_claim_beyond_what_the_route_carries_is_refused():
    with pytest.raises(wire.WireError, match=f"claims {ACTIVATION_BYTES + 1} bytes; it is {ACTIVATION_BYTES} at most"):
        on_b().admit("a", header(act(), nbytes=ACTIVATION_BYTES + 1))


def test_unexpected_keys_and_routes_are_refused():
    admission = on_b()
    with pytest.raises(wire.WireError, match="the output of b0.attn .* is not read here"):
        admission.admit("a", header(act(src="b0.attn")))
    with pytest.raises(wire.WireError, match="travels under key"):
        admission.admit("a", header(act(), key="s1/train/0/0/act/b0.res2/x"))
    with pytest.raises(wire.WireError, match="kind 'weights' is none of act, grad, sum, outer, norms, check"):
        admission.admit("a", header(SimpleNamespace(wire_key="k", wire_meta=lambda: {"session": "s1", "kind": "weights"})))
    with pytest.raises(wire.WireError, match="incomplete routing metadata"):
        admission.admit("a", header(SimpleNamespace(wire_key="k", wire_meta=lambda: {"session": "s1", "kind": "act"})))


def test_gradients_come_from_the_consumer_that_computed_them():
    on_a = Admission(plan(), GRAPH, "a")
    route = TensorRoute.gradient("s1", "train", 0, 1, src="b0.res2", consumer="b1.norm1")
    assert on_a.admit("b", header(route)) == route
    with pytest.raises(wire.WireError, match="from b1.norm1 .* comes from b, not from rogue"):
        on_a.admit("rogue", header(route))
    with pytest.raises(wire.WireError, match="b0.res2 is not on this PNode"):
        on_b().admit("a", header(route))  # nothing of b0.res2 comes back to b
    with pytest.raises(wire.WireError, match="b1.attn does not read it from another PNode"):
        on_a.admit("b", header(TensorRoute.gradient("s1", "train", 0, 1, src="b0.res2", consumer="b1.attn")))


def test_a_replica_sum_comes_from_the_partner_for_the_micro_batches_it_sums():
    admission = Admission(plan(replicas=2, index=0), GRAPH, "a0")
    embed = GRAPH.param_count("embed") * 4
    route = TensorRoute.partial_sum("s1", 0, "embed", 2, 4)
    assert admission.admit("a1", header(route, nbytes=embed)) == route
    with pytest.raises(wire.WireError, match="comes from a1, not from b1"):
        admission.admit("b1", header(route, nbytes=embed))
    with pytest.raises(wire.WireError, match=r"over micro-batches \[0, 2\) .* no replica sends this PNode that sum"):
        admission.admit("a1", header(TensorRoute.partial_sum("s1", 0, "embed", 0, 2), nbytes=embed))
    with pytest.raises(wire.WireError, match="claims"):
        admission.admit("a1", header(route, nbytes=embed + 4))


def test_check_material_comes_from_a_host_of_the_checked_vnode_and_names_a_part_it_has():
    admission = Admission(plan(replicas=2, index=0, verify=True), GRAPH, "b0")
    part = CheckPartRoute(session="s1", check="3/1/b0.attn", part="input.0", parts=4)
    for host in ("a0", "a1"):  # the host of b0.attn in either replica; the checker takes the one it is told
        assert admission.admit(host, header(part)) == part
    with pytest.raises(wire.WireError, match="check 3/1/b0.attn comes from a0 or a1, not from b1"):
        admission.admit("b1", header(part))
    tied = CheckPartRoute(session="s1", check="3/1/head", part="param.weight", parts=3)
    assert admission.admit("a0", header(tied, nbytes=GRAPH.param_count("embed") * 4)) == tied
    for bad, reason in [("param.", "no such part"), ("input.1", "no such part"), ("grad.b1.attn", "no such part"),
                        ("input.x", "no such part")]:
        with pytest.raises(wire.WireError, match=reason):
            admission.admit("a0", header(part.model_copy(update={"part": bad})))
    with pytest.raises(wire.WireError, match="is not a check id"):
        admission.admit("a0", header(part.model_copy(update={"check": "b0.attn"})))
    with pytest.raises(wire.WireError, match="no micro-batch 9"):
        admission.admit("a0", header(part.model_copy(update={"check": "3/9/b0.attn"})))
    with pytest.raises(wire.WireError, match="is not verified"):
        on_b().admit("a", header(CheckPartRoute(session="s1", check="3/1/b0.attn", part="input.0", parts=4)))


class Stages:
    def __init__(self, admission: Admission) -> None:
        self.stage = SimpleNamespace(admission=admission)

    def __call__(self, session: str):
        return self.stage if session == "s1" else None


def test_a_gigabyte_claim_in_one_small_frame_takes_no_memory():
    """Chunk 0 of 2 of a tensor claiming 1 GiB, 4 KB on the wire: refused from a PNode the plan does not
    name and from the producer itself (its route carries far less), before anything is allocated."""
    inbound = Inbound(S, Stages(on_b()))
    route = act(0, 0)
    claim = wire.TensorHeader(key=route.wire_key, dtype="uint8", shape=[1 << 30], chunk=0, chunks=2, offset=0,
                              total_bytes=1 << 30, digest="0" * 32, meta=route.wire_meta())
    raw = claim.model_dump_json().encode()
    first = wire.MAGIC + struct.pack("<I", len(raw)) + raw + bytes(4096)
    tracemalloc.start()
    try:
        for sender, reason in (("rogue", "not from rogue"), ("a", "claims 1073741824 bytes")):
            with pytest.raises(wire.WireError, match=reason):
                inbound.take(S.pnode_tensor("b", sender), first)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20, f"refusing the claim took {peak} bytes"
    assert inbound.reassembler.pending("a") == inbound.reassembler.pending("rogue") == []


def test_squatted_keys_never_block_the_genuine_tensor():
    """Chunk 0 of 2 sent ahead under the key of an upcoming activation, by another PNode and under the
    producer's route: refused; the producer's own chunks then make its tensor."""
    inbound = Inbound(S, Stages(on_b()))
    small = wire.MAX_HEADER_BYTES + 64 + ACTIVATION_BYTES // 2
    squat = frames(act(0), chunk_bytes=small, fill=7)
    with pytest.raises(wire.WireError, match="not from rogue"):
        inbound.take(S.pnode_tensor("b", "rogue"), squat[0])
    genuine = frames(act(0), chunk_bytes=small, fill=1)
    assert len(genuine) > 1
    got = [inbound.take(S.pnode_tensor("b", "a"), f) for f in genuine]
    assert got[:-1] == [None] * (len(genuine) - 1)
    assert got[-1].sender == "a" and got[-1].tensor.data == bytearray([1]) * ACTIVATION_BYTES


def test_a_sender_holds_at_most_its_budget_of_unfinished_tensors():
    """Its budget: `TENSORS_PENDING_PER_SENDER` unfinished tensors, each within its route's size."""
    admission = on_b(micro_batches=4 * TENSORS_PENDING_PER_SENDER)
    admission.running(0)
    inbound = Inbound(S, Stages(admission))
    small = wire.MAX_HEADER_BYTES + 64 + 1024
    keys = [(step, micro) for step in (0, 1) for micro in range(4 * TENSORS_PENDING_PER_SENDER)]
    for step, micro in keys:  # the first chunk of each: more unfinished tensors than allowed
        inbound.take(S.pnode_tensor("b", "a"), frames(act(step, micro), chunk_bytes=small)[0])
    pending = inbound.reassembler.pending("a")
    assert pending == [act(*k).wire_key for k in keys[-TENSORS_PENDING_PER_SENDER:]], "the newest are kept"


def test_a_frame_for_a_session_not_hosted_or_on_a_strange_subject_is_refused():
    inbound = Inbound(S, Stages(on_b()))
    route = TensorRoute.activation("s2", "train", 0, 0, "b0.res2")
    with pytest.raises(wire.WireError, match="for session 's2', which this PNode does not host"):
        inbound.take(S.pnode_tensor("b", "a"), frames(route)[0])
    with pytest.raises(wire.WireError, match="is not a tensor subject"):
        inbound.take("ca.pn.b.tensor", frames(act())[0])


def test_a_pnode_publishes_tensors_only_as_itself():
    publish = permissions("pnode", "p1", S).publish
    assert "ca.pn.*.tensor.p1" in publish
    assert not any(s.startswith("ca.pn.") and "tensor" in s and not s.endswith(".tensor.p1") for s in publish)


async def test_a_check_takes_its_material_from_the_named_host_only():
    """Another host of the VNode sends a whole set of parts first: the check waits for the named host's."""
    inbox = CheckInbox(recomputer=None)
    route = CheckPartRoute(session="s1", check="3/1/b0.attn", part="input.0", parts=1)
    inbox.receive(route, Part(torch.zeros(2), "squatter's", sender="a1"))
    with pytest.raises(ValueError, match="did not arrive from a0 within 0s"):
        await inbox.take(route.check, "a0", timeout_s=0.05)
    inbox.receive(route, Part(torch.ones(2), "host's", sender="a0"))
    assert (await inbox.take(route.check, "a0", timeout_s=1))["input.0"].digest == "host's"
    with pytest.raises(wire.WireError, match="has 1 parts and a1 sent them all"):
        inbox.receive(route.model_copy(update={"part": "input.1"}), Part(torch.zeros(2), "more", sender="a1"))


def test_gradient_norms_come_only_from_the_other_pnodes_of_a_replica_that_decides_its_steps():
    own = ReplicaSync(mode="diloco", inner_steps=4, inner_decisions="own")
    admission = Admission(plan(replicas=2, index=0, sync=own), GRAPH, "b0")
    admission.running(3)
    norms = TensorRoute.norms("s1", 3, 0, "embed")  # a0 hosts embed first, and 8 VNodes
    assert admission.admit("a0", header(norms, nbytes=8 * len(ON_A))) == norms
    with pytest.raises(wire.WireError, match="norms of step 3 named by embed comes from a0, not from a1"):
        admission.admit("a1", header(norms, nbytes=8))
    with pytest.raises(wire.WireError, match=f"claims {8 * len(ON_A) + 8} bytes; it is {8 * len(ON_A)} at most"):
        admission.admit("a0", header(norms, nbytes=8 * len(ON_A) + 8))
    with pytest.raises(wire.WireError, match="no other PNode of this replica that decides its own steps hosts b0.attn first"):
        admission.admit("a0", header(TensorRoute.norms("s1", 3, 0, "b0.attn"), nbytes=8))
    shared = Admission(plan(replicas=2, index=0, sync=own.model_copy(update={"inner_decisions": "shared"})), GRAPH, "b0")
    shared.running(3)
    with pytest.raises(wire.WireError, match="is not expected here"):
        shared.admit("a0", header(norms, nbytes=8))
