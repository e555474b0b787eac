"""Query limits, key hashing and revocation, telemetry folding: no server needed."""

from __future__ import annotations

import asyncio

import pytest
from graphql import parse, validate

from computeall.monitor import retention
from computeall.monitor.auth import Auth, hash_key
from computeall.protocol.credentials import api_key_seed, api_key_user, new_api_key, nkey_public
from computeall.monitor.db import Database
from computeall.monitor.limits import validation_rules
from computeall.monitor.server import schema

SCHEMA = schema()


def errors(query: str, variables: dict | None = None) -> list[str]:
    doc = parse(query)
    return [e.message for e in validate(SCHEMA, doc, validation_rules(None, doc, {"variables": variables}))]


def test_dashboard_queries_pass_and_abusive_ones_are_refused():
    assert errors('{ session(id: "s") { steps(maxPoints: 1000) { step loss } events { type } } pnodes { id } }') == []
    assert any("maximum cost" in e for e in errors("{ sessions(limit: 100) { steps(maxPoints: 1000) { step } } }"))
    assert any("maximum cost" in e for e in errors(
        "query($n: Int) { sessions(limit: 1000) { events(limit: $n) { seq } } }", {"n": 10_000}))
    deep = "{ __schema { types { fields { type { ofType { ofType { ofType { ofType { ofType { name } } } } } } } } } }"
    assert any("query depth 10 exceeds" in e for e in errors(deep))
    cyclic = "query { ...A } fragment A on Query { ...A }"
    assert errors(cyclic)  # reported by graphql's own rule, and the depth rule does not loop


@pytest.fixture
def db(tmp_path):
    database = Database(tmp_path / "m.duckdb", readers=1)
    yield database
    database.close()


def test_keys_are_stored_hashed_and_revocation_is_immediate(db):
    async def scenario():
        auth = Auth(db)
        key_id, key = await auth.create_key("alice", "laptop")
        stored = db.con.execute("SELECT key_hash FROM api_keys").fetchone()[0]
        assert stored == hash_key(key) and key not in stored
        assert auth.user_for(key) == "alice" and auth.user_for("ca_other") is None and auth.user_for(None) is None
        fresh = Auth(db)
        await fresh.load()
        assert fresh.user_for(key) == "alice"
        assert not await auth.revoke_key("bob", key_id)  # not bob's key
        assert await auth.revoke_key("alice", key_id)
        assert auth.user_for(key) is None

    asyncio.run(scenario())


def test_a_key_names_its_user_and_carries_a_nats_identity_and_changes_are_announced(db):
    async def scenario():
        changes = []

        async def changed():
            changes.append(await auth.nats_identities())

        auth = Auth(db, on_change=changed)
        key_id, key = await auth.create_key("alice", "laptop")
        assert api_key_user(key) == "alice"
        assert [(k.user, k.nkey, k.key_id) for k in changes[-1]] == [("alice", nkey_public(api_key_seed(key)), key_id)]
        await auth.revoke_key("alice", key_id)
        assert changes[-1] == [], "a revoked key's identity is no longer announced"

    asyncio.run(scenario())


def test_the_local_key_is_registered_from_its_file_and_a_revoked_one_stays_revoked(db, tmp_path):
    async def scenario():
        path = tmp_path / "local-api-key"
        path.write_text(new_api_key("local") + "\n")
        auth = Auth(db)
        await auth.register_local_key(path)
        await auth.register_local_key(path)
        key = path.read_text().strip()
        assert auth.user_for(key) == "local"
        key_id = db.con.execute("SELECT id FROM api_keys").fetchone()[0]
        await auth.revoke_key("local", key_id)
        await auth.register_local_key(path)
        assert auth.user_for(key) is None and db.con.execute("SELECT count(*) FROM api_keys").fetchone() == (1,)

    asyncio.run(scenario())


def test_retention_folds_whole_old_buckets_once(db):
    rows = [("p", float(ts), 100 + ts, None, None, "{}", 1) for ts in range(0, 300)]
    db.transaction(lambda con: db.insert(con, "memory_samples", ("pnode", "ts", "rss_bytes", "gpu_allocated_bytes",
                                                                 "gpu_reserved_bytes", "bytes_by_category", "pending_requests"), rows))
    db.transaction(retention.compact, 300.0, 130.0, 60.0, 10_000.0)  # cutoff 120: buckets 0 and 60 fold
    assert db.con.execute("SELECT bucket_ts, samples, rss_max FROM memory_samples_agg ORDER BY 1").fetchall() == [
        (0.0, 60, 159), (60.0, 60, 219)]
    assert db.con.execute("SELECT min(ts), count(*) FROM memory_samples").fetchone() == (120.0, 180)
    db.transaction(retention.compact, 300.0, 130.0, 60.0, 10_000.0)
    assert db.con.execute("SELECT count(*) FROM memory_samples_agg").fetchone() == (2,)
    db.transaction(retention.compact, 300.0, 130.0, 60.0, 250.0)  # folded rows older than 50 are dropped
    assert db.con.execute("SELECT bucket_ts FROM memory_samples_agg").fetchall() == [(60.0,)]


def test_samples_of_an_already_folded_bucket_merge_into_its_row(db):
    columns = ("pnode", "ts", "rss_bytes", "gpu_allocated_bytes", "gpu_reserved_bytes", "bytes_by_category", "pending_requests")
    insert = lambda rows: db.transaction(lambda con: db.insert(con, "memory_samples", columns, rows))  # noqa: E731
    insert([("p", float(ts), 100, None, None, "{}", 1) for ts in range(0, 40)])  # a monitor catching up: part of bucket 0
    db.transaction(retention.compact, 300.0, 130.0, 60.0, 10_000.0)
    insert([("p", float(ts), 200, None, None, "{}", 3) for ts in range(40, 60)])  # the rest arrives after the fold
    db.transaction(retention.compact, 300.0, 130.0, 60.0, 10_000.0)
    (bucket,) = db.con.execute("SELECT bucket_ts, samples, rss_avg, rss_max, pending_avg FROM memory_samples_agg").fetchall()
    assert bucket[:2] == (0.0, 60) and bucket[3] == 200
    assert bucket[2] == pytest.approx((40 * 100 + 20 * 200) / 60) and bucket[4] == pytest.approx((40 + 60) / 60)


def test_late_requests_merge_into_their_folded_bucket(db):
    columns = ("pnode", "session_id", "request", "step", "state", "ts", "duration_s")
    for durations in ([1.0, 2.0], [6.0]):  # the second arrives after bucket 0 was folded
        rows = [("p", "s", "RunStep", 1, "done", float(i), d) for i, d in enumerate(durations)]
        db.transaction(lambda con: db.insert(con, "requests", columns, rows))
        db.transaction(retention.compact, 300.0, 130.0, 60.0, 10_000.0)
    assert db.con.execute("SELECT bucket_ts, count, duration_avg, duration_max FROM requests_agg").fetchall() == [
        (0.0, 3, 3.0, 6.0)]
