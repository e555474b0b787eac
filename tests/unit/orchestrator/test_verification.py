"""Spot checks on the orchestrator's side: the check stream, the verdict, and where a quarantine rolls back to."""

from __future__ import annotations

import pytest

from computeall.network import Graph, load_network_file
from computeall.orchestrator.verification.judge import Claim, judge
from computeall.orchestrator.verification.stream import checks_of_step, tiebreaker
from computeall.protocol.config import DataConfig, SessionConfig, VerifyConfig
from computeall.protocol.events import (
    Allocated, CheckpointCommitted, CheckpointObject, EventEnvelope, PNodeQuarantined, Reallocated, ResultsDiscarded,
    RolledBack, SessionClaimed, SessionCreated, SessionStarted, StepCompleted, ValidationCompleted, VNodePlacement,
    standing,
)
from computeall.protocol.session_state import SessionState
from computeall.protocol.verification import CheckReport, ItemDigests

from ..tools import TOOLS

REPO = TOOLS.parent

GRAPH = Graph(load_network_file(REPO / "examples/networks/micro-gpt.yaml"))
THREE = {"p0": "cpu", "p1": "cpu", "p2": "cpu"}


def assignment(pnodes: list[str]) -> dict[str, str]:
    return {v: pnodes[i * len(pnodes) // len(GRAPH.order)] for i, v in enumerate(GRAPH.order)}


def picks(seed=1, step=0, rate=0.2, devices=THREE, micro_batches=4, share=0.5):
    return checks_of_step(seed, step, VerifyConfig(rate=rate, backward_share=share), GRAPH, micro_batches,
                          assignment(sorted(devices)), devices)


def test_the_stream_is_a_pure_function_of_seed_and_step():
    assert picks() == picks()
    assert picks(seed=2) != picks() and picks(step=1) != picks()


def test_the_stream_checks_the_share_it_is_asked_to():
    items = [i for step in range(200) for i in picks(step=step, rate=0.1)]
    share = len(items) / (200 * 4 * len(GRAPH.order))
    assert 0.08 < share < 0.12
    assert 0.4 < sum(i.backward for i in items) / len(items) < 0.6
    assert all(i.checker != i.pnode for i in items)
    assert {i.checker for i in items} == set(THREE), "every PNode takes its turn checking"


def test_a_checker_computes_on_the_same_kind_of_device():
    devices = {"p0": "cpu", "p1": "cuda:0", "p2": "cuda:1"}
    items = [i for step in range(50) for i in picks(step=step, devices=devices)]
    assert items and all(i.pnode != "p0" and {i.pnode, i.checker} == {"p1", "p2"} for i in items), \
        "p0 (the only CPU) has nobody to check it; the GPUs check each other"
    assert not picks(rate=1.0, devices={"p0": "cpu"}), "one PNode: nobody else can check"


def test_the_tiebreaker_is_neither_host_nor_checker():
    item = picks(rate=1.0)[0]
    assert tiebreaker(1, item, THREE) not in (item.pnode, item.checker, None)
    assert tiebreaker(1, item, {item.pnode: "cpu", item.checker: "cpu"}) is None


def report(output="out", inputs=None, grads=None) -> CheckReport:
    return CheckReport(inputs=inputs or {"a": "in"}, grads=grads or {}, result=ItemDigests(micro=0, vnode="v", output=output))


CLAIM = Claim(inputs={"a": "in"}, grads={}, result=ItemDigests(micro=0, vnode="v", output="out"))
BAD_MATERIAL = {"a": "other"}


@pytest.mark.parametrize("checker, third, quarantined", [
    (report(), None, set()),                                              # agrees: passed
    (report("x"), None, {"host", "checker"}),                              # no third: both
    (report("x"), report(), {"checker"}),                                  # the third sides with the host
    (report("x"), report("x"), {"host"}),                                  # the third sides with the checker
    (report("x"), report("y"), {"host", "checker", "third"}),              # three different answers
    (report(inputs=BAD_MATERIAL), report(inputs=BAD_MATERIAL), {"host"}),  # the host sent wrong material to both
    (report(inputs=BAD_MATERIAL), report(), {"host", "checker"}),          # one says the material is wrong: both go
    (report("x"), report(inputs=BAD_MATERIAL), {"host", "third"}),
])
def test_the_verdict(checker, third, quarantined):
    assert judge(CLAIM, "host", "checker", checker, "third" if third else None, third) == quarantined


# -- where a quarantine rolls back to ---------------------------------------------------------------

def placed(*pnodes: str, cls=Allocated, **extra) -> Allocated:
    return cls(placements=[VNodePlacement(vnode=f"v{i}", op="add", pnode=p, params=1, precision="fp32")
                           for i, p in enumerate(pnodes)], edges=[], pnodes=list(pnodes), bytes_across_per_step=0, **extra)


def checkpoint(step: int) -> CheckpointCommitted:
    return CheckpointCommitted(step=step, bucket="b", objects=[CheckpointObject(vnode="v0", object="o", digest="d", bytes=1)],
                               seconds=0.1)


def fold(*events) -> SessionState:
    config = SessionConfig(network_yaml="x", data=DataConfig(files=["f"]), steps=100)
    state = SessionState(id="s")
    for seq, e in enumerate([SessionCreated(config=config, owner="o"), SessionStarted(), *events], 1):
        state.apply(EventEnvelope(session_id="s", payload=e), seq)
    return state


def test_a_pnode_there_from_the_start_sends_the_session_back_to_its_beginning():
    state = fold(SessionClaimed(orchestrator="o", resume_from_step=0), placed("a", "b"), checkpoint(5), checkpoint(10))
    assert state.clean_checkpoint({"b"}) == 0


def test_a_pnode_that_joined_later_sends_it_back_to_the_checkpoint_it_joined_at():
    state = fold(SessionClaimed(orchestrator="o", resume_from_step=0), placed("a", "b"), checkpoint(5),
                 placed("a", "b", "c", cls=Reallocated, reason="c joined"), checkpoint(10), checkpoint(15))
    assert state.clean_checkpoint({"c"}) == 5
    assert state.clean_checkpoint({"b"}) == 0


def test_a_rollback_to_before_a_pnode_worked_cleans_the_state_of_it():
    # c joined at 5, was lost; the session went back to 5 without it: checkpoints after that are clean of c
    state = fold(SessionClaimed(orchestrator="o", resume_from_step=0), placed("a"), checkpoint(5),
                 placed("a", "c", cls=Reallocated, reason="c joined"), checkpoint(10),
                 placed("a", cls=Reallocated, reason="lost c"), RolledBack(to_step=5, from_step=12), checkpoint(15))
    assert state.clean_checkpoint({"c"}) == 15


def test_a_discard_supersedes_the_steps_and_drops_the_checkpoints_after_it():
    state = fold(SessionClaimed(orchestrator="o", resume_from_step=0), placed("a", "b"), checkpoint(5),
                 *[StepCompleted(step=s, loss=1.0, tokens=1, step_time_s=0.1, lr=0.1) for s in range(12)],
                 PNodeQuarantined(pnode="b", step=11, reason="wrong"), ResultsDiscarded(from_step=0, pnodes=["b"], reason="r"))
    assert state.quarantined == ["b"] and state.next_step == 0 and state.checkpoints == []


def test_a_discard_supersedes_the_records_of_the_steps_run_again():
    def done(s, loss):
        return StepCompleted(step=s, loss=loss, tokens=1, step_time_s=0.1, lr=0.1)

    validations = [ValidationCompleted(step=s, loss=1.0, perplexity=2.7, tokens=1) for s in (2, 3)]
    payloads = [*(done(s, 1.0) for s in range(4)), *validations, ResultsDiscarded(from_step=2, pnodes=["b"], reason="r"),
                done(2, 2.0), done(3, 2.0)]
    kept = standing(payloads)
    assert [(p.step, p.loss) for p in kept if isinstance(p, StepCompleted)] == [(0, 1.0), (1, 1.0), (2, 2.0), (3, 2.0)]
    assert [p.step for p in kept if isinstance(p, ValidationCompleted)] == [2], "the state after 2 steps was clean"
