"""Numbered schema migrations of the monitor's DuckDB file, applied in place when it opens.

`migrations/NNN_what.sql` are applied in order, each in one transaction together with the row
of `schema_version` that records it, so a monitor stopped mid-upgrade restarts from the last
migration that committed and never loses rows. A file made before versions were recorded has
the tables of 001 and no `schema_version`: it counts as version 0, and 001 (all `IF NOT
EXISTS`) leaves its tables alone. A schema change is a new file here, never an edit of an old one.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path

import duckdb

MIGRATIONS_DIR = Path(__file__).with_name("migrations")
SCHEMA_VERSION_TABLE = "schema_version"
_NAME = re.compile(r"^(\d{3})_([a-z0-9_]+)\.sql$")


class SchemaError(RuntimeError):
    """The file's schema cannot be brought to this build's (newer than this build, or a bad migration set)."""


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str


def load(directory: Path = MIGRATIONS_DIR) -> list[Migration]:
    """Every migration in `directory`, checked to be numbered 1, 2, 3, ... with no gap."""
    found = []
    for path in sorted(directory.glob("*.sql")):
        match = _NAME.match(path.name)
        if not match:
            raise SchemaError(f"{path}: a migration is named NNN_what.sql (three digits, lowercase words)")
        found.append(Migration(int(match[1]), match[2], path.read_text()))
    versions = [m.version for m in found]
    if versions != list(range(1, len(found) + 1)):
        raise SchemaError(f"migrations in {directory} must be numbered 001, 002, ... with no gap or repeat: {versions}")
    return found


def version(con: duckdb.DuckDBPyConnection) -> int:
    con.execute(
        f"CREATE TABLE IF NOT EXISTS {SCHEMA_VERSION_TABLE} "
        "(version INTEGER PRIMARY KEY, name VARCHAR NOT NULL, applied_ts DOUBLE NOT NULL)"
    )
    return con.execute(f"SELECT coalesce(max(version), 0) FROM {SCHEMA_VERSION_TABLE}").fetchone()[0]


def migrate(con: duckdb.DuckDBPyConnection, where: str, migrations: list[Migration] | None = None) -> int:
    """Bring the database to the newest schema; returns its version."""
    migrations = load() if migrations is None else migrations
    current, latest = version(con), len(migrations)
    if current > latest:
        raise SchemaError(
            f"{where} has schema version {current}, newer than this monitor's {latest}: "
            "run the computeall version that wrote it (or newer), or move the file aside to start a fresh one"
        )
    for m in migrations[current:]:
        con.begin()
        try:
            con.execute(m.sql)
            con.execute(f"INSERT INTO {SCHEMA_VERSION_TABLE} VALUES (?, ?, ?)", [m.version, m.name, time.time()])
        except BaseException:
            con.rollback()
            raise
        con.commit()
    return max(current, latest)
