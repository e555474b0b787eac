"""DuckDB migrations: a file of an older schema is upgraded in place and keeps its rows."""

from __future__ import annotations

import shutil

import duckdb
import pytest

from computeall.monitor import migrate, store
from computeall.monitor.db import Database

INITIAL_SQL = (migrate.MIGRATIONS_DIR / "001_initial.sql").read_text()  # tables.sql before versions were recorded


def legacy_file(path):
    """A monitor file as the code before migrations left it: 001's tables, some rows, no schema_version."""
    con = duckdb.connect(str(path))
    con.execute(INITIAL_SQL)
    con.execute("INSERT INTO positions VALUES ('CA_LOG', 41, 2), ('CA_TEL', 7, 0)")
    con.execute("INSERT INTO sessions (id, owner, status, reason) VALUES ('a', 'alice', 'running', NULL), "
                "('b', 'alice', 'requested', NULL), ('c', 'bob', 'rejected', 'bad yaml'), ('d', 'bob', 'completed', NULL)")
    con.execute("INSERT INTO steps VALUES ('a', 0, 1.0, 3.5, 64, 0.5, 0.001, 1.0, 0.4, 0.1)")
    con.execute("INSERT INTO events (seq, type, session_id, envelope) VALUES (41, 'StepCompleted', 'a', '{}')")
    con.execute("INSERT INTO users VALUES ('alice', 1.0)")
    con.execute("INSERT INTO api_keys VALUES ('k1', 'alice', 'hash', 'laptop', 1.0, NULL)")
    con.close()


def test_a_file_of_the_first_schema_is_upgraded_in_place_and_keeps_its_rows(tmp_path):
    path = tmp_path / "monitor.duckdb"
    legacy_file(path)
    db = Database(path, readers=1)
    try:
        latest = len(migrate.load())
        assert db.schema_version == latest
        assert db.con.execute("SELECT version FROM schema_version ORDER BY version").fetchall() == [
            (v,) for v in range(1, latest + 1)]
        assert store.positions(db.con) == {"CA_LOG": 41, "CA_TEL": 7}
        # 002: the status vocabulary of the session fold; a refused create keeps its reason
        assert db.con.execute("SELECT id, status, reason FROM sessions ORDER BY id").fetchall() == [
            ("a", "running", None), ("b", "new", None), ("c", "new", "bad yaml"), ("d", "completed", None)]
        assert db.con.execute("SELECT session_id, step, loss FROM steps").fetchall() == [("a", 0, 3.5)]
        assert db.con.execute("SELECT count(*) FROM events").fetchone() == (1,)
        assert db.con.execute("SELECT name FROM users").fetchall() == [("alice",)]
        assert db.con.execute("SELECT id, key_hash FROM api_keys").fetchall() == [("k1", "hash")]
        # 005: keys made before have no nkey (they log into the dashboard only)
        assert db.con.execute("SELECT nkey FROM api_keys").fetchall() == [(None,)]
    finally:
        db.close()
    # opening again applies nothing twice
    db = Database(path, readers=1)
    try:
        assert db.con.execute("SELECT count(*) FROM schema_version").fetchone() == (len(migrate.load()),)
    finally:
        db.close()


def with_extra(tmp_path, name: str, sql: str):
    directory = tmp_path / "migrations"
    shutil.copytree(migrate.MIGRATIONS_DIR, directory)
    (directory / name).write_text(sql)
    return migrate.load(directory)


def test_a_new_migration_adds_a_column_to_an_existing_file(tmp_path):
    path = tmp_path / "monitor.duckdb"
    Database(path, readers=1).close()  # today's schema, as a monitor left it
    con = duckdb.connect(str(path))
    con.execute("INSERT INTO steps (session_id, step, loss) VALUES ('a', 0, 3.5)")
    migrations = with_extra(tmp_path, f"{len(migrate.load()) + 1:03d}_grad_norm.sql",
                            "ALTER TABLE steps ADD COLUMN grad_norm DOUBLE;")
    assert migrate.migrate(con, str(path), migrations) == len(migrations)
    assert con.execute("SELECT session_id, step, loss, grad_norm FROM steps").fetchall() == [("a", 0, 3.5, None)]
    con.close()


def test_a_failing_migration_leaves_the_file_as_it_was(tmp_path):
    path = tmp_path / "monitor.duckdb"
    Database(path, readers=1).close()
    before = len(migrate.load())
    migrations = with_extra(tmp_path, f"{before + 1:03d}_broken.sql",
                            "ALTER TABLE steps ADD COLUMN half DOUBLE; ALTER TABLE no_such_table ADD COLUMN x INT;")
    con = duckdb.connect(str(path))
    with pytest.raises(duckdb.CatalogException):
        migrate.migrate(con, str(path), migrations)
    assert migrate.version(con) == before
    assert "half" not in {r[0] for r in con.execute("DESCRIBE steps").fetchall()}
    con.close()


def test_a_file_newer_than_this_build_is_refused_with_what_to_do(tmp_path):
    path = tmp_path / "monitor.duckdb"
    Database(path, readers=1).close()
    con = duckdb.connect(str(path))
    con.execute("INSERT INTO schema_version VALUES (99, 'from_the_future', 0)")
    con.close()
    with pytest.raises(migrate.SchemaError, match=r"schema version 99, newer than this monitor's .*run the computeall version"):
        Database(path, readers=1)


@pytest.mark.parametrize("name", ["3_short.sql", "003_Bad-Name.sql", f"{len(migrate.load()) + 2:03d}_gap.sql"])
def test_misnamed_or_misnumbered_migrations_are_refused(tmp_path, name):
    directory = tmp_path / "migrations"
    shutil.copytree(migrate.MIGRATIONS_DIR, directory)
    (directory / name).write_text("SELECT 1;")
    with pytest.raises(migrate.SchemaError, match="NNN_what.sql|no gap"):
        migrate.load(directory)


def test_a_rebuild_empties_the_projection_and_keeps_users_keys_and_the_schema_version(tmp_path):
    path = tmp_path / "monitor.duckdb"
    legacy_file(path)
    db = Database(path, readers=1)
    try:
        db.transaction(store.reset_projection)
        for table in ("positions", "sessions", "steps", "events"):
            assert db.con.execute(f"SELECT count(*) FROM {table}").fetchone() == (0,), table
        assert db.con.execute("SELECT count(*) FROM users").fetchone() == (1,)
        assert db.con.execute("SELECT count(*) FROM api_keys").fetchone() == (1,)
        assert migrate.version(db.con) == len(migrate.load())
    finally:
        db.close()
