"""The monitor's session status is the session fold's: checked event by event over whole lives.

Four sessions (stopped, completed, failed, deleted) between them record every session event type the
protocol defines; after each event the status in DuckDB must equal `SessionState.apply`'s.
"""

from __future__ import annotations

import typing

import pytest

from computeall.monitor import store
from computeall.monitor.db import Database
from computeall.monitor.projector import Message, project
from computeall.monitor.session_status import STATUSES
from computeall.protocol.commands import CommandEnvelope, CreateSession
from computeall.protocol.config import DataConfig, SessionConfig
from computeall.protocol.events import (
    Allocated, CheckpointCommitted, CheckpointDiscarded, CheckpointPruned, CheckpointObject, CommandRejected,
    EventEnvelope, InitializedFrom,
    LossScaleChanged, PauseRequested, Sample, SamplesGenerated,
    PNodeLost, PNodeSlow, Reallocated, RolledBack, SessionClaimed, SessionCompleted, SessionCreated, SessionEvent,
    SessionFailed, SessionPaused, SessionQueued, SessionResumed, SessionStarted, SessionStopped, StepAborted, StepCompleted,
    StepSkipped, StopRequested, UpdateRatios, ValidationCompleted, ValidationRequested, VNodePlacement,
    CheckOutcome, ChecksCompleted, PNodeQuarantined, ResultsDiscarded, VerificationFailed, VerificationSeeded,
    DeleteRequested, SessionDeleted,
)
from computeall.protocol.verification import ItemDigests
from computeall.protocol.session_state import SessionState

CONFIG = SessionConfig(network_yaml="name: t\n", data=DataConfig(files=["a"]), steps=9)
PLACEMENT = VNodePlacement(vnode="embed", op="embedding", pnode="p1", params=10, precision="fp32")


def step(i: int) -> StepCompleted:
    return StepCompleted(step=i, loss=3.0 - i / 10, tokens=64, step_time_s=0.5, lr=1e-3)


def checkpoint(i: int) -> CheckpointCommitted:
    return CheckpointCommitted(step=i, bucket="b", objects=[CheckpointObject(vnode="embed", object="o", digest="d", bytes=1)],
                               seconds=0.1)


STORIES = {
    "stopped": [
        SessionCreated(config=CONFIG, owner="alice"), SessionStarted(), SessionClaimed(orchestrator="o1", resume_from_step=0),
        Allocated(placements=[PLACEMENT], edges=[], pnodes=["p1"], bytes_across_per_step=0),
        step(0), step(1), PauseRequested(), SessionPaused(step=2), SessionResumed(),
        SessionClaimed(orchestrator="o1", resume_from_step=2), checkpoint(2), step(2),
        PNodeSlow(pnode="p1", step=3, waited_s=2.0), PNodeLost(pnode="p1", step=3), StepAborted(step=3, reason="p1 lost"),
        Reallocated(placements=[PLACEMENT.model_copy(update={"pnode": "p2"})], edges=[], pnodes=["p2"],
                    bytes_across_per_step=0, reason="lost p1", moves={"embed": "p2"}),
        RolledBack(to_step=2, from_step=3), step(2), UpdateRatios(step=2, ratios={"b0": 1e-3}), step(3),
        VerificationSeeded(seed=7),
        ChecksCompleted(step=3, checks=[CheckOutcome(micro=0, vnode="embed", pnode="p2", checker="p3", backward=True,
                                                     outcome="failed")]),
        VerificationFailed(step=3, micro=0, vnode="embed", pnode="p2", checker="p3", backward=True,
                           claimed=ItemDigests(micro=0, vnode="embed", output="a"),
                           recomputed=ItemDigests(micro=0, vnode="embed", output="b"), tiebreaker="p4",
                           tiebreak=ItemDigests(micro=0, vnode="embed", output="b"), tiebreak_material_ok=True,
                           quarantined=["p2"]),
        PNodeQuarantined(pnode="p2", step=3, reason="recomputing embed gave other results"),
        ResultsDiscarded(from_step=2, pnodes=["p2"], reason="p2 may have computed wrong results"),
        RolledBack(to_step=2, from_step=4), step(2), step(3), checkpoint(4), checkpoint(6), CheckpointPruned(step=2),
        CheckpointDiscarded(step=6, reason="object s/00000006/embed.safetensors in b is corrupted (digest mismatch with the log)"),
        LossScaleChanged(step=4, old=65536.0, new=32768.0, reason="overflow"), StepSkipped(step=5, reason="overflow"),
        ValidationRequested(), ValidationCompleted(step=5, loss=2.5, perplexity=12.2, tokens=640),
        StopRequested(), SessionStopped(step=6),
    ],
    "completed": [
        SessionCreated(config=CONFIG, owner="bob"), SessionQueued(reason="bob has 2 sessions running (limit 2)"),
        SessionStarted(),
        InitializedFrom(source="session s0 at step 4", session_id="s0", step=4, bucket="b", objects=checkpoint(4).objects),
        checkpoint(0), step(0), SamplesGenerated(step=1, samples=[Sample(prompt="", text="to be", tokens=2)], pnode="p1", seconds=0.2),
        SessionCompleted(steps=1, final_loss=3.0),
    ],
    "failed": [
        SessionCreated(config=CONFIG, owner="bob"), SessionStarted(), SessionFailed(reason="no PNode can host embed"),
    ],
    "deleted": [  # deleted while it ran: stopped at a step boundary, then deleted
        SessionCreated(config=CONFIG, owner="bob"), SessionStarted(), SessionClaimed(orchestrator="o1", resume_from_step=0),
        step(0), StopRequested(), DeleteRequested(), SessionStopped(step=1), SessionDeleted(),
    ],
}


@pytest.fixture
def db(tmp_path):
    database = Database(tmp_path / "m.duckdb", readers=1)
    yield database
    database.close()


def messages() -> list[tuple[str, EventEnvelope, Message]]:
    out = []
    for sid, payloads in STORIES.items():
        for payload in payloads:
            env = EventEnvelope(session_id=sid, payload=payload)
            out.append((sid, env, Message("CA_LOG", len(out) + 1, f"ca.evt.session.{sid}.{env.type}",
                                          env.model_dump_json().encode())))
    return out


def monitor_status(db: Database, sid: str) -> str:
    row = db.con.execute("SELECT status FROM sessions WHERE id = ?", [sid]).fetchone()
    return row[0] if row else SessionState(id=sid).status


def type_names(union) -> set[str]:
    return {m.model_fields["type"].default for m in typing.get_args(typing.get_args(union)[0])}


def test_the_stories_record_every_session_event_type():
    told = {type(p).__name__ for payloads in STORIES.values() for p in payloads}
    missing = type_names(SessionEvent) - told - {"CommandRejected"}  # CommandRejected: its own test below
    assert not missing, f"add {sorted(missing)} to STORIES, so the monitor's status is checked against the fold for them"


def test_status_after_every_event_is_the_folds(db):
    folds = {sid: SessionState(id=sid) for sid in STORIES}
    for sid, env, msg in messages():
        batch = project([msg])
        assert not batch.malformed
        db.transaction(lambda con: store.apply(db, con, batch, []))
        folds[sid].apply(env, msg.seq)
        assert monitor_status(db, sid) == folds[sid].status, f"{sid} after {env.type}"
    assert {sid: monitor_status(db, sid) for sid in STORIES} == {sid: sid for sid in STORIES}
    ended = db.con.execute("SELECT id FROM sessions WHERE started_ts IS NOT NULL AND ended_ts IS NOT NULL").fetchall()
    assert sorted(r[0] for r in ended) == sorted(STORIES)


def test_one_batch_of_all_stories_ends_where_the_fold_does(db):
    batch = project([msg for _, _, msg in messages()])
    db.transaction(lambda con: store.apply(db, con, batch, []))
    # every event is stored, those without a handler (SessionClaimed, RolledBack, ...) too
    assert db.con.execute("SELECT count(*) FROM events").fetchone() == (len(messages()),)
    for sid, payloads in STORIES.items():
        fold = SessionState(id=sid)
        for seq, payload in enumerate(payloads, 1):
            fold.apply(EventEnvelope(session_id=sid, payload=payload), seq)
        assert monitor_status(db, sid) == fold.status
    statuses = {r[0] for r in db.con.execute("SELECT DISTINCT status FROM sessions").fetchall()}
    assert statuses <= set(STATUSES)


def test_a_refused_create_stays_new_with_the_reason(db):
    cmd = CommandEnvelope(actor="carol", session_id="r", payload=CreateSession(config=CONFIG))
    refused = EventEnvelope(session_id="r", payload=CommandRejected(command_id=cmd.id, command_type="CreateSession",
                                                                     reason="network_yaml: not valid YAML"))
    batch = project([
        Message("CA_LOG", 1, "ca.cmd.carol.session.r", cmd.model_dump_json().encode()),
        Message("CA_LOG", 2, "ca.evt.session.r.CommandRejected", refused.model_dump_json().encode()),
    ])
    db.transaction(lambda con: store.apply(db, con, batch, []))
    fold = SessionState(id="r")
    fold.apply(refused, 2)
    assert db.con.execute("SELECT owner, status, reason FROM sessions").fetchone() == (
        "carol", fold.status, "network_yaml: not valid YAML")


def test_a_commands_actor_is_the_user_its_subject_names(db):
    forged = CommandEnvelope(actor="mallory", session_id="f", payload=CreateSession(config=CONFIG))
    batch = project([Message("CA_LOG", 1, "ca.cmd.carol.session.f", forged.model_dump_json().encode())])
    db.transaction(lambda con: store.apply(db, con, batch, []))
    assert db.con.execute("SELECT owner FROM sessions").fetchone() == ("carol",)
    assert db.con.execute("SELECT actor FROM events").fetchone() == ("carol",)


def test_a_queued_session_shows_why_until_it_runs(db):
    seq = iter(range(1, 100))

    def reason_after(*payloads) -> tuple[str, str | None]:
        batch = project([Message("CA_LOG", next(seq), f"ca.evt.session.q.{type(p).__name__}",
                                 EventEnvelope(session_id="q", payload=p).model_dump_json().encode())
                         for p in payloads])
        db.transaction(lambda con: store.apply(db, con, batch, []))
        return db.con.execute("SELECT status, reason FROM sessions WHERE id = 'q'").fetchone()

    queued = SessionQueued(reason="carol has 2 sessions running (limit 2)")
    assert reason_after(SessionCreated(config=CONFIG, owner="carol"), queued) == ("queued", queued.reason)
    assert reason_after(SessionStarted()) == ("running", None)
