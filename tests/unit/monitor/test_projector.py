"""Projection of CA_LOG and CA_TEL messages into DuckDB rows, without NATS."""

from __future__ import annotations

import json

import pytest

from computeall.monitor import store
from computeall.monitor.db import Database
from computeall.monitor.projector import Message, project
from computeall.protocol.commands import CommandEnvelope, CreateSession
from computeall.protocol.config import DataConfig, SessionConfig
from computeall.protocol.events import (
    EventEnvelope, LossScaleChanged, PNodeJoined, PNodeLeft, PNodeLost, Reallocated, SessionCompleted, SessionCreated,
    SessionPaused, SessionStarted, StepCompleted, VNodePlacement,
)
from computeall.protocol.telemetry import MemorySample, RequestStatus

CONFIG = SessionConfig(network_yaml="name: t\n", data=DataConfig(files=["a"]), steps=3)


@pytest.fixture
def db(tmp_path):
    database = Database(tmp_path / "m.duckdb", readers=1)
    yield database
    database.close()


def log(seq: int, env) -> Message:
    kind = "cmd" if isinstance(env, CommandEnvelope) else "evt"
    return Message("CA_LOG", seq, f"ca.{kind}.session.{env.session_id}.{env.type}", env.model_dump_json().encode())


def step(sid: str, i: int, loss: float) -> EventEnvelope:
    return EventEnvelope(session_id=sid, payload=StepCompleted(step=i, loss=loss, tokens=10, step_time_s=0.5, lr=1e-3))


def apply(db: Database, messages: list[Message]):
    batch = project(messages)
    db.transaction(lambda con: store.apply(db, con, batch, []))
    return batch


def test_a_session_from_command_to_completion(db):
    msgs = [
        log(1, CommandEnvelope(actor="alice", session_id="s", payload=CreateSession(config=CONFIG))),
        log(2, EventEnvelope(session_id="s", payload=SessionCreated(config=CONFIG, owner="alice"))),
        log(3, EventEnvelope(session_id="s", payload=SessionStarted())),
        log(4, step("s", 0, 3.0)),
        log(5, step("s", 1, 2.0)),
        log(6, step("s", 1, 2.5)),  # re-run after a rollback: replaces step 1
        log(7, EventEnvelope(session_id="s", payload=SessionCompleted(steps=2, final_loss=2.5))),
    ]
    batch = apply(db, msgs)
    assert batch.positions == {"CA_LOG": 7}
    row = db.con.execute("SELECT owner, status, step, last_loss, tokens, tokens_per_s, started_ts IS NOT NULL, "
                         "ended_ts IS NOT NULL FROM sessions").fetchone()
    assert row == ("alice", "completed", 2, 2.5, 20, 20.0, True, True)  # `step`: steps completed
    assert db.con.execute("SELECT step, loss FROM steps ORDER BY step").fetchall() == [(0, 3.0), (1, 2.5)]
    assert db.con.execute("SELECT count(*), count(*) FILTER (kind = 'command') FROM events").fetchone() == (7, 1)
    assert [t for t, _ in batch.notices if t.startswith("steps:")] == ["steps:s"] * 3


def test_malformed_messages_are_counted_kept_and_skipped(db):
    good = step("s", 0, 1.0)
    bad = json.loads(good.model_dump_json())
    bad["payload"]["loss"] = "high"
    mismatched = json.loads(good.model_dump_json())
    mismatched["type"] = "SessionStarted"
    batch = apply(db, [
        Message("CA_LOG", 1, "ca.evt.session.s.StepCompleted", b"{not json"),
        Message("CA_LOG", 2, "ca.evt.session.s.StepCompleted", json.dumps(bad).encode()),
        Message("CA_LOG", 3, "ca.evt.session.s.SessionStarted", json.dumps(mismatched).encode()),
        Message("CA_TEL", 1, "ca.tel.p.memory", b'{"type": "MemorySample"}'),
        log(4, good),
    ])
    assert len(batch.malformed) == 4
    assert db.con.execute("SELECT stream, seq, malformed FROM positions ORDER BY stream").fetchall() == [
        ("CA_LOG", 4, 3), ("CA_TEL", 1, 1)]
    assert db.con.execute("SELECT seq FROM events").fetchall() == [(4,)]
    assert db.con.execute("SELECT count(*) FROM steps").fetchone() == (1,)


def test_unknown_types_are_stored_and_lifecycle_events_projected(db):
    def env(seq: int, type_: str, payload: dict) -> Message:
        body = {"id": f"e{seq}", "type": type_, "ts": 1.0, "session_id": "s", "payload": {"type": type_, **payload}}
        return Message("CA_LOG", seq, f"ca.evt.session.s.{type_}", json.dumps(body).encode())

    placement = VNodePlacement(vnode="embed", op="embedding", pnode="p2", params=10, precision="fp32")
    apply(db, [
        log(1, EventEnvelope(session_id="s", payload=SessionCreated(config=CONFIG, owner="bob"))),
        log(2, EventEnvelope(session_id="s", payload=SessionPaused(step=3))),
        log(3, EventEnvelope(session_id="s", payload=LossScaleChanged(step=3, old=65536.0, new=32768.0, reason="overflow"))),
        log(4, EventEnvelope(session_id="s", payload=PNodeLost(pnode="p9", step=3))),
        log(5, EventEnvelope(session_id="s", payload=Reallocated(
            placements=[placement], edges=[], pnodes=["p2"], bytes_across_per_step=0, reason="lost p9", moves={"embed": "p2"}))),
        env(6, "Brand-new", {"anything": [1, 2]}),  # a type this build does not know: stored, not projected
    ])
    assert db.con.execute("SELECT status, loss_scale, pnodes FROM sessions").fetchone() == ("paused", 32768.0, '["p2"]')
    assert db.con.execute("SELECT state FROM pnodes WHERE id = 'p9'").fetchone() == ("lost",)
    assert db.con.execute("SELECT type FROM allocations").fetchall() == [("Reallocated",)]
    assert db.con.execute("SELECT count(*) FROM events").fetchone() == (6,)


def test_pnode_events_and_telemetry(db):
    joined = EventEnvelope(payload=PNodeJoined(pnode="p1", host="h", os_pid=7, device="cpu", memory_bytes=100))
    left = EventEnvelope(payload=PNodeLeft(pnode="p1"))
    sample = MemorySample(pnode="p1", ts=5.0, rss_bytes=42, gpu_allocated_bytes=7, hosted_vnodes=["a"])
    older = MemorySample(pnode="p1", ts=4.0, rss_bytes=41)
    req = RequestStatus(pnode="p1", session_id="s", request="RunStep", state="running", ts=5.0)
    apply(db, [
        Message("CA_LOG", 1, "ca.evt.pnode.p1.PNodeJoined", joined.model_dump_json().encode()),
        Message("CA_TEL", 1, "ca.tel.p1.memory", sample.model_dump_json().encode()),
        Message("CA_TEL", 2, "ca.tel.p1.memory", older.model_dump_json().encode()),
        Message("CA_TEL", 3, "ca.tel.p1.request", req.model_dump_json().encode()),
    ])
    assert db.con.execute("SELECT state, os_pid, rss_bytes, gpu_allocated_bytes, hosted_vnodes FROM pnodes").fetchone() == (
        "live", 7, 42, 7, '["a"]')
    assert db.con.execute("SELECT count(*) FROM memory_samples").fetchone() == (2,)
    assert db.con.execute("SELECT count(*) FROM requests").fetchone() == (1,)
    apply(db, [Message("CA_LOG", 2, "ca.evt.pnode.p1.PNodeLeft", left.model_dump_json().encode())])
    assert db.con.execute("SELECT state FROM pnodes").fetchone() == ("left",)


def test_reset_projection_keeps_users(db):
    apply(db, [log(1, EventEnvelope(session_id="s", payload=SessionCreated(config=CONFIG, owner="bob")))])
    db.con.execute("INSERT INTO users VALUES ('bob', 1.0)")
    db.transaction(store.reset_projection)
    assert db.con.execute("SELECT count(*) FROM sessions").fetchone() == (0,)
    assert db.con.execute("SELECT count(*) FROM positions").fetchone() == (0,)
    assert db.con.execute("SELECT count(*) FROM users").fetchone() == (1,)
