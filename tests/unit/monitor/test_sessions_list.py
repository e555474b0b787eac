"""The dashboard's sessions list: a deleted session is left out (and reads as a missing one), a
verification run says which session it verifies, as `computeall session list` does."""

from __future__ import annotations

from pathlib import Path

from graphql import build_schema

from computeall.monitor import reads
from computeall.protocol.config import DataConfig, ReplayOf, SessionConfig
from computeall.protocol.events import SessionCreated, SessionDeleted, SessionStarted, SessionStopped

from .test_session_explained import apply, db  # noqa: F401  (db: the fixture)

SCHEMA = Path(__file__).resolve().parents[3] / "services" / "monitor" / "schema.graphql"
CONFIG = SessionConfig(network_yaml="name: t\n", data=DataConfig(files=["a"]), steps=20)


def test_a_deleted_session_leaves_the_list_and_reads_as_missing(db):
    apply(db, "kept", [SessionCreated(config=CONFIG, owner="alice"), SessionStarted()])
    apply(db, "gone", [SessionCreated(config=CONFIG, owner="alice"), SessionStarted(), SessionStopped(step=3)], first_seq=3)
    assert sorted(s["id"] for s in reads.sessions(db.con, "alice", 10)) == ["gone", "kept"]
    stopped_at = reads.session(db.con, "alice", "gone")["ended_at"]
    apply(db, "gone", [SessionDeleted()], first_seq=6)
    assert [s["id"] for s in reads.sessions(db.con, "alice", 10)] == ["kept"]
    assert reads.session(db.con, "alice", "gone") is None
    assert db.con.execute("SELECT status, ended_ts FROM sessions WHERE id = 'gone'").fetchone() == ("deleted", stopped_at), \
        "the row stays, with when it ended"


def test_a_verification_run_names_the_session_it_verifies(db):
    verify = CONFIG.model_copy(update={"replay_of": ReplayOf(session_id="a1b2c3", from_step=10, to_step=15)})
    apply(db, "v1", [SessionCreated(config=verify, owner="alice")])
    apply(db, "t1", [SessionCreated(config=CONFIG, owner="alice")], first_seq=2)
    assert {s["id"]: s["verifies"] for s in reads.sessions(db.con, "alice", 10)} == {"v1": "a1b2c3", "t1": None}


def test_the_schema_serves_both():
    schema = build_schema(SCHEMA.read_text())
    assert "verifies" in schema.type_map["Session"].fields
    assert "deleteSession" in schema.mutation_type.fields
