"""Requests to PNodes that go unanswered: each kind is allowed a few times what it took lately (a
stated allowance before anything is measured); past it, a PNode that heartbeats but has not answered
is at fault and lost, unless a reconnect to the bus excuses it (messages lost with a nats-server) or
every PNode answered and some passes starved (the step runs again in place)."""

import asyncio
from pathlib import Path
from types import SimpleNamespace

import nats.errors
import pytest

from computeall.network import Graph, load_network_file
from computeall.orchestrator.errors import PNodeFailure, SessionError, StepStalled, Unanswered
from computeall.orchestrator.placement import CHECKPOINT_BYTES_PER_PARAM, Placement
from computeall.orchestrator.pnode_calls import PNodeCalls
from computeall.orchestrator.pnodes import PNodeRegistry
from computeall.orchestrator.session_pnodes import OUTER_SYNC_LANDS, SessionPNodes
from computeall.orchestrator import stalls
from computeall.orchestrator.stalls import (
    ANSWER_FLOOR_S, FIRST_ANSWER_S, STALL_FACTOR, STALL_FLOOR_S, Allowance, StallDeadlines,
)
from computeall.protocol.pnode_api import ApplyStep, PNodeReply, RunStep
from computeall.protocol.replica_sync import ReplicaSync, SparseCompression
from computeall.protocol.wire import INT8_BLOCK
from computeall.protocol.subjects import Subjects
from computeall.protocol.telemetry import Heartbeat

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "networks"


def beat(name: str, incarnation: str = "i", reconnects: int = 0) -> Heartbeat:
    return Heartbeat(pnode=name, host="h", os_pid=1, device="cpu", memory_bytes=1 << 30, ts=0.0,
                     incarnation=incarnation, reconnects=reconnects)


class Bus:
    """Answers a request to `answers` PNodes at once; the others' replies never come. `starved` PNodes
    answer that their pass gave up waiting for inputs; `not_listening` requests first find nobody
    listening (a PNode reconnecting); `restarted` PNodes answer from a new process that holds no
    plan; `impostors` answer in another PNode's name; `refusing` PNodes answer with an error; each
    answer comes after `answer_s` (0 unless said)."""

    def __init__(self, answers: set[str], not_listening: int = 0, restarted: frozenset[str] = frozenset(),
                 starved: frozenset[str] = frozenset(), impostors: frozenset[str] = frozenset(),
                 refusing: frozenset[str] = frozenset(), answer_s: dict[str, float] | None = None) -> None:
        self.answers = answers
        self.refusing = refusing
        self.answer_s = answer_s or {}
        self.answered: list[str] = []
        self.not_listening = not_listening
        self.restarted = restarted
        self.starved = starved
        self.impostors = impostors
        self.asked = 0
        self.sent: list[tuple[str, bytes]] = []

    async def request(self, subject: str, data: bytes, timeout: float):
        self.asked += 1
        self.sent.append((subject, data))
        if self.not_listening:
            self.not_listening -= 1
            raise nats.errors.NoRespondersError
        pnode = subject.split(".")[-2]  # ca.pn.<pnode>.ctl
        await asyncio.sleep(self.answer_s.get(pnode, 0.0))
        self.answered.append(pnode)
        if pnode in self.refusing:
            reply = PNodeReply(ok=False, pnode=pnode, error="DamagedObject: the checkpoint's digest differs")
        elif pnode in self.restarted:
            reply = PNodeReply.no_plan(pnode, "s")
        elif pnode in self.starved:
            reply = PNodeReply(ok=False, starved=True, pnode=pnode, error="inputs of [...] did not arrive within 1.0s")
        elif pnode in self.impostors:
            reply = PNodeReply(ok=True, pnode="p0")
        elif pnode in self.answers:
            reply = PNodeReply(ok=True, pnode=pnode)
        else:
            await asyncio.sleep(timeout)
            raise nats.errors.TimeoutError
        return SimpleNamespace(data=reply.model_dump_json().encode())


def calls(bus: Bus) -> PNodeCalls:
    registry = PNodeRegistry()
    for p in ("p0", "p1", "p2"):
        registry.beat(beat(p))
    return PNodeCalls(bus, Subjects("ca"), registry)


def run_step(pnode: str) -> RunStep:
    return RunStep(session_id="s", step=3)


async def test_a_pnode_that_heartbeats_but_never_answers_is_lost_while_the_others_answered():
    c = calls(Bus(answers={"p0", "p2"}))
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    with pytest.raises(Unanswered, match="p1 heartbeat but did not answer within 0.5s") as failure:
        await c.all(["p0", "p1", "p2"], run_step, allowance=Allowance(answer_s=0.5, reconnect_s=None))
    assert 0.5 <= loop.time() - t0 < 1.5
    assert failure.value.pnodes == ["p1"]
    assert c.registry.is_live("p1"), "it still heartbeats"
    assert [hb.pnode for hb in c.registry.live()] == ["p0", "p2"], "but gets no more work"
    c.registry.beat(beat("p1", incarnation="restarted"))
    assert "p1" in [hb.pnode for hb in c.registry.live()], "a new process of it joins as new"


async def test_pnodes_starved_by_a_silent_one_are_not_at_fault():
    """p1 never answers, so p0 and p2, waiting for its tensors, give up and say so before the deadline."""
    c = calls(Bus(answers=set(), starved=frozenset({"p0", "p2"})))
    with pytest.raises(Unanswered) as failure:
        await c.all(["p0", "p1", "p2"], run_step, allowance=Allowance(answer_s=0.5, reconnect_s=None))
    assert failure.value.pnodes == ["p1"]


async def test_a_pass_whose_inputs_never_came_runs_again_losing_nobody():
    c = calls(Bus(answers={"p1"}, starved=frozenset({"p0", "p2"})))
    with pytest.raises(StepStalled, match="p0: inputs of") as stall:
        await c.all(["p0", "p1", "p2"], run_step, allowance=Allowance(answer_s=5.0, reconnect_s=None))
    assert stall.value.pnodes == [] and len(c.registry.live()) == 3


async def test_an_error_is_raised_once_every_other_pnode_has_answered():
    """p0 refuses at once while p1 still loads: what the caller does next (load an older checkpoint) must
    not race p1's request."""
    bus = Bus(answers={"p1"}, refusing=frozenset({"p0"}), answer_s={"p1": 0.6})
    c = calls(bus)
    with pytest.raises(SessionError, match="pnode p0 failed RunStep: DamagedObject"):
        await c.all(["p0", "p1"], run_step, allowance=Allowance(answer_s=5.0, reconnect_s=None))
    assert bus.answered == ["p0", "p1"]


async def test_a_request_stalls_early_only_after_a_reconnect():
    c = calls(Bus(answers={"p0"}))
    allowance = Allowance(answer_s=30.0, reconnect_s=0.3)
    with pytest.raises(asyncio.TimeoutError):  # no reconnect seen: it waits, as for a slow PNode
        await asyncio.wait_for(c.all(["p0", "p1"], run_step, allowance=allowance), 1.0)
    c.registry.beat(beat("p1", reconnects=1))  # p1's server died; it reconnected to another
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    with pytest.raises(StepStalled, match="p1 did not answer"):
        await c.all(["p0", "p1"], run_step, allowance=allowance)
    assert 0.3 <= loop.time() - t0 < 1.0


async def test_a_reconnect_excuses_a_pnode_that_did_not_answer():
    """Nothing measured yet (no early stall): at the deadline a reconnect seen meanwhile means its
    messages may have been lost, so nobody is at fault."""
    c = calls(Bus(answers={"p0"}))
    c.registry.beat(beat("p1", reconnects=1))
    with pytest.raises(StepStalled, match="made again meanwhile"):
        await c.all(["p0", "p1"], run_step, allowance=Allowance(answer_s=0.5, reconnect_s=None))
    assert len(c.registry.live()) == 3


async def test_a_reply_in_another_pnodes_name_is_refused():
    """Identity comes from the subject: a PNode answering as another is treated as lost."""
    c = calls(Bus(answers={"p0"}, impostors=frozenset({"p1"})))
    with pytest.raises(PNodeFailure, match="p1 answered RunStep as 'p0'") as failure:
        await c.all(["p0", "p1"], run_step)
    assert failure.value.pnodes == ["p1"] and "p1" not in [hb.pnode for hb in c.registry.live()]


async def test_a_pnode_that_answers_from_a_new_process_is_lost_not_a_broken_session():
    """It restarted and answered before its new heartbeat came: its state is gone, so the session
    recovers without it (a `SessionError` would end the session)."""
    c = calls(Bus(answers={"p0"}, restarted=frozenset({"p1"})))
    with pytest.raises(PNodeFailure, match="restarted") as failure:
        await c.all(["p0", "p1"], run_step)
    assert failure.value.pnodes == ["p1"]


def test_a_restarted_pnode_is_no_reconnect():
    registry = PNodeRegistry()
    registry.beat(beat("p", "a", reconnects=2))
    registry.beat(beat("p", "b", reconnects=0))
    registry.beat(beat("p", "b", reconnects=0))
    assert registry.disturbed_at == float("-inf")
    registry.beat(beat("p", "b", reconnects=1))
    assert registry.disturbed_at > float("-inf")


async def test_a_pnode_reconnecting_is_asked_again_not_declared_dead():
    bus = Bus(answers={"p0"}, not_listening=2)
    c = calls(bus)
    reply = await c.one("p0", run_step("p0"))
    assert reply.ok and bus.asked == 3 and c.registry.is_live("p0")


def test_allowances_follow_what_a_kind_took():
    deadlines = StallDeadlines()
    first = deadlines.allowance("RunStep")
    assert first == Allowance(answer_s=FIRST_ANSWER_S, reconnect_s=None)  # nothing measured: the stated bound
    assert first.answer_s <= 30 and first.give_up_s == first.answer_s / 2
    deadlines.estimate("RunStep", 20.0)  # the allocation says a step takes 20 s: allow a few times that
    assert deadlines.allowance("RunStep").answer_s == STALL_FACTOR * 20.0
    for took in (0.1, 0.1, 5.0):
        deadlines.took("RunStep", took)
    # the median, 0.1 s: four times that is under either floor
    assert deadlines.allowance("RunStep") == Allowance(answer_s=ANSWER_FLOOR_S, reconnect_s=STALL_FLOOR_S)
    for took in (3.0, 3.0):
        deadlines.took("RunStep", took)
    assert deadlines.allowance("RunStep") == Allowance(answer_s=STALL_FACTOR * 3.0, reconnect_s=STALL_FACTOR * 3.0)
    deadlines.stalled("RunStep")
    deadlines.stalled("RunStep")
    assert deadlines.allowance("RunStep").answer_s == 4 * STALL_FACTOR * 3.0  # doubled at each stall in a row
    assert deadlines.allowance("ApplyStep").answer_s == FIRST_ANSWER_S
    deadlines.took("RunStep", 3.0)
    assert deadlines.allowance("RunStep").answer_s == STALL_FACTOR * 3.0


async def test_what_waits_for_other_pnodes_is_told_to_give_up_before_the_deadline():
    """Passes and ApplySteps (diloco's outer sync lands in one) carry `give_up_s`: half their kind's
    allowance; an ApplyStep landing an outer sync has its own, from what the sync sends over the links."""
    bus = Bus(answers={"p0", "p1"})
    c = calls(bus)
    recorder = SimpleNamespace(state=SimpleNamespace(id="s", next_step=3, config=SimpleNamespace(slow_after_s=60.0)))
    pnodes = SessionPNodes(c, recorder)
    pnodes.adopt(["p0", "p1"], outer_sync_s=40.0)
    await pnodes.all(run_step)
    await pnodes.all(lambda p: ApplyStep(session_id="s", step=3, lr=0.1))
    await pnodes.all(lambda p: ApplyStep(session_id="s", step=4, lr=0.1), kind=OUTER_SYNC_LANDS)
    sent = [(RunStep if b'"RunStep"' in d else ApplyStep).model_validate_json(d) for _, d in bus.sent]
    assert [r.give_up_s for r in sent if isinstance(r, RunStep)] == [FIRST_ANSWER_S / 2] * 2
    applied = {r.step: r.give_up_s for r in sent if isinstance(r, ApplyStep)}
    assert applied[3] == FIRST_ANSWER_S / 2
    assert applied[4] == pytest.approx(STALL_FACTOR * (40.0 + pnodes.deadlines._took["RunStep"][0]) / 2)
    # measured apart: a quick ApplyStep does not shorten the next landing's allowance
    assert pnodes.deadlines.allowance("ApplyStep").reconnect_s is not None
    assert pnodes.deadlines.allowance(OUTER_SYNC_LANDS).reconnect_s is not None
    assert len(pnodes.deadlines._took["ApplyStep"]) == len(pnodes.deadlines._took[OUTER_SYNC_LANDS]) == 1


async def test_a_first_update_is_allowed_a_few_times_the_pass_that_made_its_gradients():
    """A 1B network's first ApplyStep on shared cores took longer than the stated 30 s and all four PNodes
    were treated as lost; an update costs less than its step's pass, so that pass times the first one."""
    pnodes = SessionPNodes(calls(Bus(answers={"p0"})), SimpleNamespace(
        state=SimpleNamespace(id="s", next_step=0, config=SimpleNamespace(slow_after_s=60.0))))
    pnodes.adopt(["p0"], outer_sync_s=5.0)
    assert pnodes.deadlines.allowance("ApplyStep").answer_s == FIRST_ANSWER_S
    pnodes.deadlines.took("RunStep", 1.0)  # measured before: a pass's own durations are kept as they were
    await pnodes.all(run_step)
    took = pnodes.deadlines._took["RunStep"][-1]
    assert pnodes.deadlines._estimates["ApplyStep"] == took
    assert pnodes.deadlines._estimates[OUTER_SYNC_LANDS] == 5.0 + took
    pnodes.deadlines.estimate("ApplyStep", 60.0)  # as a 1B network's first pass
    assert pnodes.deadlines.allowance("ApplyStep").answer_s == STALL_FACTOR * 60.0


def test_a_checkpoint_is_allowed_a_few_times_its_share_over_the_slowest_link():
    """A home link moves a small network's checkpoint in tens of seconds: its first SaveCheckpoint must not
    count as unanswered at the stated bound (the WAN lab's home profile lost both PNodes that way)."""
    pnodes = SessionPNodes(calls(Bus(answers=set())), SimpleNamespace())
    pnodes.adopt(["p0", "p1"], estimated_step_s=2.0, checkpoint_s=25.0)
    for kind in ("SaveCheckpoint", "LoadCheckpoint"):
        assert pnodes.deadlines.allowance(kind).answer_s == STALL_FACTOR * 25.0
    assert pnodes.deadlines.allowance("RunStep").answer_s == FIRST_ANSWER_S  # 4 x 2 s is under the bound


def test_a_checkpoints_share_is_its_pnodes_parameters_over_its_link():
    graph = Graph(load_network_file(EXAMPLES / "tiny-gpt.yaml"))
    half = len(graph.order) // 2
    assignment = {v: ("near" if i < half else "far") for i, v in enumerate(graph.order)}
    links = {"near": 100e6, "far": 2.5e6}  # bytes/s: a LAN, and a home link's 20 Mbit/s
    registry = SimpleNamespace(capacities=lambda: [SimpleNamespace(pnode=p, bandwidth_bytes_per_s=b) for p, b in links.items()])
    session_pnodes = SimpleNamespace(calls=SimpleNamespace(nc=None, subjects=None))
    placement = Placement(SimpleNamespace(state=SimpleNamespace(id="s")), registry, session_pnodes, None, graph, "d", None)
    far = sum(graph.param_count(v) for v, p in assignment.items() if p == "far")
    checkpoint = lambda n: n * CHECKPOINT_BYTES_PER_PARAM
    allocation = SimpleNamespace(assignments=[assignment])
    assert placement._over_links_s(allocation, checkpoint) == checkpoint(far) / 2.5e6  # PNode to PNode
    everything = sum(checkpoint(graph.param_count(v)) for v in graph.order)
    assert placement._over_links_s(allocation, checkpoint, into_the_bus=True) == everything / 2.5e6


def test_an_outer_sync_sends_the_pseudo_gradient_or_its_sparse_message_per_level():
    """What the landing ApplyStep's first allowance is made of: a PNode's bytes per outer sync."""
    n = 1 << 20
    assert ReplicaSync(mode="diloco", wire="bf16").sent_bytes(n, replicas=2) == 2 * n
    assert ReplicaSync(mode="diloco", wire="bf16").sent_bytes(n, replicas=4) == 2 * 2 * n  # two butterfly levels
    assert ReplicaSync(mode="diloco", wire="int8").sent_bytes(n, replicas=2) == n + 4 * n // INT8_BLOCK
    sparse = ReplicaSync(mode="diloco", compression=SparseCompression())
    message = SparseCompression().layout(n).message_bytes
    assert sparse.sent_bytes(n, replicas=4) == 3 * message and message < 4 * n / 100  # under 1% of fp32


async def test_a_run_step_sent_behind_an_apply_step_is_allowed_the_time_of_both(monkeypatch):
    # an ApplyStep that lands an outer sync waits on the replicas' links; the pass sent right behind it
    # starts only then, and its PNode is no less answering for that
    monkeypatch.setattr(stalls, "ANSWER_FLOOR_S", 0.0)
    monkeypatch.setattr(stalls, "STALL_FLOOR_S", 0.0)

    def session(bus: Bus) -> SessionPNodes:
        pnodes = SessionPNodes(calls(bus), SimpleNamespace(
            state=SimpleNamespace(id="s", next_step=3, config=SimpleNamespace(slow_after_s=60.0))))
        pnodes.adopt(["p0"], outer_sync_s=1.0)
        pnodes.deadlines._took["RunStep"].extend([0.05] * 3)  # its own allowance: 0.2 s
        pnodes.deadlines._took[OUTER_SYNC_LANDS].extend([0.1] * 3)  # the landing's: 0.4 s
        return pnodes

    bus = Bus(answers={"p0"}, answer_s={"p0": 0.3})  # the landing and then the pass
    with pytest.raises(Unanswered):
        await session(bus).all(run_step)
    pnodes = session(bus)
    (reply,) = await pnodes.all(run_step, behind=OUTER_SYNC_LANDS)
    assert reply.ok
    sent = RunStep.model_validate_json(bus.sent[-1][1])
    assert sent.give_up_s == pytest.approx(STALL_FACTOR * 0.05 / 2), "its pass gives up on its own time"
    assert Allowance(1.0, None).after(Allowance(2.0, 3.0)) == Allowance(3.0, None), "nothing measured: no early stall"
