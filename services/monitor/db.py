"""The monitor's DuckDB file: one connection, one writer thread, a few reader threads.

DuckDB calls block, so none runs on the event loop. All writes go through one thread, which
serializes transactions without locks; reads use their own cursors (DuckDB's MVCC lets them
run while a write is in progress), so a slow ingest batch never delays a GraphQL query.
"""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence, TypeVar

import duckdb

from . import migrate

T = TypeVar("T")


class Database:
    def __init__(self, path: str | Path, readers: int = 4) -> None:
        self.path = str(path)
        self.con = duckdb.connect(self.path)
        self.schema_version = migrate.migrate(self.con, self.path)
        self.column_types = _column_types(self.con)
        self._writer = ThreadPoolExecutor(1, thread_name_prefix="duckdb-write")
        self._readers = ThreadPoolExecutor(readers, thread_name_prefix="duckdb-read")
        self._local = threading.local()

    async def write(self, fn: Callable[..., T], *args: Any) -> T:
        """Run `fn(con, *args)` inside one transaction on the writer thread."""
        return await asyncio.get_running_loop().run_in_executor(self._writer, self.transaction, fn, *args)

    def transaction(self, fn: Callable[..., T], *args: Any) -> T:
        """Synchronous form of `write`, for code already on the writer thread or offline tools."""
        self.con.begin()
        try:
            result = fn(self.con, *args)
        except BaseException:
            self.con.rollback()
            raise
        self.con.commit()
        return result

    async def read(self, fn: Callable[..., T], *args: Any) -> T:
        """Run `fn(cursor, *args)` on a reader thread with that thread's own cursor."""
        return await asyncio.get_running_loop().run_in_executor(self._readers, self._read, fn, *args)

    def _read(self, fn: Callable[..., T], *args: Any) -> T:
        cursor = getattr(self._local, "cursor", None)
        if cursor is None:
            cursor = self._local.cursor = self.con.cursor()
        return fn(cursor, *args)

    def insert(
        self,
        con: duckdb.DuckDBPyConnection,
        table: str,
        columns: Sequence[str],
        rows: Iterable[Sequence[Any]],
        on_conflict: str = "",
    ) -> None:
        """Bulk insert as one statement of typed UNNESTed lists: ~100x faster than executemany."""
        rows = list(rows)
        if not rows:
            return
        types = self.column_types[table]
        unnests = ", ".join(f"UNNEST(?::{types[c]}[]) AS {c}" for c in columns)
        values = [list(col) for col in zip(*rows)]
        con.execute(f"INSERT INTO {table} ({', '.join(columns)}) SELECT {unnests} {on_conflict}", values)

    def close(self) -> None:
        self._readers.shutdown(wait=True)
        self._writer.shutdown(wait=True)
        self.con.close()


def _column_types(con: duckdb.DuckDBPyConnection) -> dict[str, dict[str, str]]:
    rows = con.execute(
        "SELECT table_name, column_name, data_type FROM information_schema.columns WHERE table_schema = 'main'"
    ).fetchall()
    types: dict[str, dict[str, str]] = {}
    for table, column, data_type in rows:
        types.setdefault(table, {})[column] = data_type
    return types
