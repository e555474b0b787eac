"""A PNode's side of spot checks, two PNodes in one process: the host's ledger, the material it keeps,
the checker's recomputation, and a faulty host whose results the recomputation contradicts."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from computeall.network import Graph, NetworkSpec
from computeall.pnode import batches
from computeall.pnode.node import PNode
from computeall.pnode.routing import CheckPartRoute
from computeall.protocol.credentials import Credential
from computeall.protocol.faults import FaultSpec
from computeall.protocol.pnode_api import ApplyStep, Recompute, RunStep, SendCheckMaterial
from computeall.protocol.verification import CheckItem, KeepMaterial
from computeall.protocol.subjects import Subjects
from computeall.tensorcore.tensor_frames import encoded_frames
from computeall.tensorcore.wire_formats import wire_format

from .test_prefetch_forgotten import SESSION, plan


async def fake_batch(nc, subjects, request, timeout):
    g = np.random.default_rng(request.step * 100 + request.micro)
    ids = g.integers(0, 64, (request.batch, request.context + 1), dtype=np.int64)
    return "int64", list(ids.shape), bytearray(ids.tobytes())


class Bus:
    """Delivers tensor frames between PNodes in this process, as NATS would."""

    max_payload = 1 << 20

    def __init__(self) -> None:
        self.pnodes: dict[str, PNode] = {}

    async def publish(self, subject: str, data: bytes) -> None:
        name = subject.split(".")[2]  # ca.pn.<to>.tensor.<from>
        await self.pnodes[name].on_tensor(SimpleNamespace(subject=subject, data=data))


@pytest.fixture
async def pnodes(monkeypatch):
    monkeypatch.setattr(batches, "fetch_batch", fake_batch)
    bus = Bus()

    def make(name: str, fault: FaultSpec | None = None) -> PNode:
        node = PNode(Credential(role="pnode", name=name), 1 << 30, torch.device("cpu"), Subjects("ca"), fault=fault)
        node.nc, node.js = bus, None
        bus.pnodes[name] = node
        return node

    yield make
    for node in bus.pnodes.values():
        node.executor.shutdown(wait=True)
        node.check_executor.shutdown(wait=True)


def verified_plan(micro_batches: int = 2, wire: str = "fp32"):
    p = plan()
    return p.model_copy(update={"verify": True, "micro_batches": micro_batches, "network": {**p.network, "wire": wire}})


async def run_step_and_check(host: PNode, checker: PNode, items: list[tuple[int, str, bool]], wire: str = "fp32"):
    """Step 0 on the host (hosting everything), then a check of each item on the checker."""
    p = verified_plan(wire=wire)
    for node in (host, checker):
        assert (await node.dispatch(p)).ok
    reply = await host.dispatch(RunStep(session_id=SESSION, step=0))
    ledger = {(e.micro, e.vnode): e for e in reply.ledger}
    checks = [CheckItem(step=0, micro=m, vnode=v, pnode=host.name, checker=checker.name, backward=b) for m, v, b in items]
    keep = [KeepMaterial(check_id=c.check_id, micro=c.micro, vnode=c.vnode, backward=c.backward) for c in checks]
    assert (await host.dispatch(ApplyStep(session_id=SESSION, step=0, lr=1e-2, keep=keep))).ok
    reports = []
    for c in checks:
        assert (await host.dispatch(SendCheckMaterial(session_id=SESSION, check_id=c.check_id, to=checker.name))).ok
        reports.append((await checker.dispatch(Recompute(session_id=SESSION, item=c))).check)
    return ledger, reports


ITEMS = [(0, "embed", True), (1, "b0.attn", True), (0, "b1.res1", True), (1, "b1.mlp", False), (1, "head", True),
         (0, "b0.attn", True), (0, "head", False)]  # the last two reuse a module the checker built before


@pytest.mark.parametrize("wire", ["fp32", "int8"])  # compressed: digests are of what the readers get
async def test_a_checker_recomputes_exactly_what_the_host_committed_to(pnodes, wire):
    host, checker = pnodes("p"), pnodes("q")
    ledger, reports = await run_step_and_check(host, checker, ITEMS, wire)
    graph = Graph(NetworkSpec.model_validate(verified_plan(wire=wire).network))
    assert {v for _, v in ledger} == set(graph.order) and {m for m, _ in ledger} == {0, 1}
    for (m, vid, backward), report in zip(ITEMS, reports):
        claim = ledger[(m, vid)]
        assert report.result == (claim if backward else claim.forward_only()), vid
        # the inputs the host handed over are what their producers committed to
        assert report.inputs == {n: ledger[(m, n)].output for n in graph.vnodes[vid].inputs if not n.startswith("data.")}
        if backward and vid != "head":
            assert report.grads == {c: ledger[(m, c)].input_grads[vid] for c in graph.consumers(vid)}
    kept = host.stages[SESSION].audit.kept
    assert kept["0/0/b0.attn"].params is kept["0/1/b0.attn"].params, "one copy of a VNode's parameters per step"
    assert host.stages[SESSION].audit.nbytes() > 0, "material is kept until released"
    await host.dispatch(ApplyStep(session_id=SESSION, step=1, lr=0.0, skip=True, release=[f"0/{m}/{v}" for m, v, _ in ITEMS]))
    assert host.stages[SESSION].audit.nbytes() == 0


async def test_a_faulty_host_is_contradicted(pnodes):
    host, checker = pnodes("p", FaultSpec.parse("corrupt:1")), pnodes("q")
    ledger, reports = await run_step_and_check(host, checker, ITEMS)
    for (m, vid, backward), report in zip(ITEMS, reports):
        assert report.result.output != ledger[(m, vid)].output, vid
        if backward and vid not in ("embed",):  # the embedding hands no gradient back
            assert report.result.input_grads != ledger[(m, vid)].input_grads, vid


async def test_a_faulty_checker_disagrees_with_an_honest_host(pnodes):
    host, checker = pnodes("p"), pnodes("q", FaultSpec.parse("corrupt:1"))
    ledger, reports = await run_step_and_check(host, checker, ITEMS[:2])
    assert all(r.result.output != ledger[(m, v)].output for (m, v, _), r in zip(ITEMS, reports))


async def test_recording_a_ledger_changes_no_bit_of_the_step(pnodes):
    plain, verified = pnodes("a"), pnodes("b")
    assert (await plain.dispatch(plan().model_copy(update={"micro_batches": 2}))).ok
    assert (await verified.dispatch(verified_plan())).ok
    for node in (plain, verified):
        reply = await node.dispatch(RunStep(session_id=SESSION, step=0))
        await node.dispatch(ApplyStep(session_id=SESSION, step=0, lr=1e-2))
        node.loss = reply.loss_sum
    assert plain.loss == verified.loss
    a, b = plain.stages[SESSION].runtime.parameters(), verified.stages[SESSION].runtime.parameters()
    assert all(torch.equal(a[n], b[n]) for n in a)


async def test_a_check_without_material_says_so(pnodes):
    host, checker = pnodes("p"), pnodes("q")
    for node in (host, checker):
        await node.dispatch(verified_plan())
    with pytest.raises(ValueError, match="no material is kept for check 0/0/embed"):
        await host.dispatch(SendCheckMaterial(session_id=SESSION, check_id="0/0/embed", to="q"))
    item = CheckItem(step=0, micro=0, vnode="embed", pnode="p", checker="q", backward=False)
    checker.step_deadline_s = 0.2
    with pytest.raises(ValueError, match="did not arrive from p within"):
        await checker.dispatch(Recompute(session_id=SESSION, item=item))


async def test_check_material_that_is_not_raw_is_rejected(pnodes):
    checker = pnodes("q")
    await checker.dispatch(verified_plan())
    route = CheckPartRoute(session=SESSION, check="0/0/b0.attn", part="input.0", parts=1)
    encoded = wire_format("int8").encode(torch.randn(2, 8, 32))
    for frame in encoded_frames(route.wire_key, encoded, Bus.max_payload, route.wire_meta()):
        await checker.on_tensor(SimpleNamespace(subject=checker.subjects.pnode_tensor("q", "p"), data=frame))
    assert checker.inbound.rejected == 1  # its digest would not be the tensor's: the checker reports digests of raw bytes
