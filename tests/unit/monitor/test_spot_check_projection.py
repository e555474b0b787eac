"""Spot checks in the monitor: counts per PNode and session, the quarantine, discarded steps."""

from __future__ import annotations

from computeall.monitor import reads
from computeall.monitor.projector import Message
from computeall.protocol.events import (
    CheckOutcome, ChecksCompleted, EventEnvelope, PNodeQuarantined, ResultsDiscarded, SessionCreated,
)

from .test_projector import CONFIG, apply, db, log, step  # noqa: F401  (db is a fixture)


def checks(sid: str, step_: int, *outcomes: tuple[str, str]) -> EventEnvelope:
    return EventEnvelope(session_id=sid, payload=ChecksCompleted(step=step_, checks=[
        CheckOutcome(micro=0, vnode="v", pnode=pnode, checker="x", backward=False, outcome=outcome)
        for pnode, outcome in outcomes]))


def on_pnode_subject(seq: int, payload: PNodeQuarantined) -> Message:
    env = EventEnvelope(payload=payload)
    return Message("CA_LOG", seq, f"ca.evt.pnode.{payload.pnode}.{env.type}", env.model_dump_json().encode())


def test_counts_a_quarantine_and_discarded_steps(db):
    quarantined = PNodeQuarantined(pnode="p2", step=3, reason="recomputing v gave other results")
    apply(db, [
        log(1, EventEnvelope(session_id="s", payload=SessionCreated(config=CONFIG, owner="alice"))),
        log(2, EventEnvelope(session_id="o", payload=SessionCreated(config=CONFIG, owner="bob"))),
        *[log(3 + i, step("s", i, 3.0 - i / 10)) for i in range(4)],
        log(7, checks("s", 1, ("p1", "passed"), ("p2", "passed"))),
        log(8, checks("s", 2, ("p1", "passed"), ("p2", "abandoned"))),
        log(9, checks("s", 3, ("p2", "failed"))),
        log(10, checks("o", 0, ("p2", "passed"))),  # bob's session
        log(11, EventEnvelope(session_id="s", payload=quarantined)),
        on_pnode_subject(12, quarantined),  # the same event on the PNode's own subject
        log(13, EventEnvelope(session_id="s", payload=ResultsDiscarded(from_step=2, pnodes=["p2"], reason="r"))),
        log(14, step("s", 2, 2.75)),  # the re-run
    ])
    cur = db.con.cursor()
    assert reads.session_checks(cur, "s") == [
        {"pnode": "p1", "passed": 2, "failed": 0, "abandoned": 0},
        {"pnode": "p2", "passed": 1, "failed": 1, "abandoned": 1},
    ]
    assert reads.pnode_checks(cur, "alice")["p2"] == {"passed": 1, "failed": 1, "abandoned": 1}, "only alice's sessions"
    assert reads.pnode_checks(cur, "bob") == {"p2": {"passed": 1, "failed": 0, "abandoned": 0}}
    (p2,) = [p for p in reads.pnodes(cur, 5.0, "alice") if p["id"] == "p2"]
    assert p2["state"] == "quarantined" and p2["quarantine_reason"] == quarantined.reason and p2["quarantined_at"]
    assert p2["checks"] == {"passed": 1, "failed": 1, "abandoned": 1}
    assert [p["checks"] for p in reads.pnodes(cur, 5.0, "carol") if p["id"] == "p2"] == [
        {"passed": 0, "failed": 0, "abandoned": 0}], "no sessions, no checks"
    steps = db.con.execute("SELECT step, loss FROM steps WHERE session_id = 's' ORDER BY step").fetchall()
    assert steps == [(0, 3.0), (1, 2.9), (2, 2.75)], "steps from 2 on were discarded, then step 2 re-run"
