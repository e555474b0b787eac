"""Telemetry retention: recent samples stay raw, older ones are folded into fixed buckets.

PNodes sample every few seconds for as long as a session runs, so raw rows alone would grow
without bound. Folding keeps what charts of a long session need (per-bucket average and
maximum memory, request counts and durations) at a fixed cost per bucket, and folded rows
past `telemetry_keep_s` are dropped. The cutoff is aligned to a bucket boundary. A sample that
arrives after its bucket was folded (a monitor catching up on its backlog, a PNode's late
telemetry) is merged into that bucket's row: a bucket is always one row.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import duckdb


@dataclass(frozen=True)
class Fold:
    """How one raw table folds into its bucket table (columns in the bucket table's order)."""

    raw: str
    folded: str
    keys: tuple[str, ...]  # besides bucket_ts
    count: str  # the folded table's count column
    from_raw: tuple[str, ...]  # the folded columns after the count, from a bucket's raw rows
    merge: tuple[str, ...]  # the same, from a bucket's folded rows (averages weighted by `count`)


MEMORY = Fold(
    "memory_samples", "memory_samples_agg", ("pnode",), "samples",
    ("avg(rss_bytes)", "max(rss_bytes)", "max(gpu_allocated_bytes)", "max(gpu_reserved_bytes)", "avg(pending_requests)",
     "max(pending_requests)"),
    ("sum(rss_avg * samples) / sum(samples)", "max(rss_max)", "max(gpu_allocated_max)", "max(gpu_reserved_max)",
     "sum(pending_avg * samples) / sum(samples)", "max(pending_max)"),
)
REQUESTS = Fold(
    "requests", "requests_agg", ("pnode", "session_id", "request", "state"), "count",
    ("avg(duration_s)", "max(duration_s)"),
    ("sum(duration_avg * count) / sum(count)", "max(duration_max)"),
)


def compact(con: duckdb.DuckDBPyConnection, now: float, raw_s: float, bucket_s: float, keep_s: float) -> None:
    cutoff = math.floor((now - raw_s) / bucket_s) * bucket_s
    for fold in (MEMORY, REQUESTS):
        _fold(con, fold, cutoff, bucket_s)
        con.execute(f"DELETE FROM {fold.folded} WHERE bucket_ts < ?", [now - keep_s])
    # step timings answer "where did the last steps' time go": nothing older is asked for
    con.execute("DELETE FROM step_timings WHERE ts < ?", [cutoff])


def _fold(con: duckdb.DuckDBPyConnection, fold: Fold, cutoff: float, bucket_s: float) -> None:
    """Raw rows older than `cutoff` into their buckets, together with what those buckets already hold."""
    keys = ", ".join(fold.keys)
    same_bucket = " AND ".join(f"{fold.folded}.{k} = fresh.{k}" for k in (*fold.keys, "bucket_ts"))
    con.execute(f"CREATE OR REPLACE TEMP TABLE fresh AS SELECT * FROM {fold.folded} LIMIT 0")
    con.execute(f"INSERT INTO fresh SELECT {keys}, floor(ts / {bucket_s}) * {bucket_s}, count(*), "
                f"{', '.join(fold.from_raw)} FROM {fold.raw} WHERE ts < ? GROUP BY ALL", [cutoff])
    con.execute(f"INSERT INTO fresh SELECT * FROM {fold.folded} SEMI JOIN fresh USING ({keys}, bucket_ts)")
    con.execute(f"DELETE FROM {fold.folded} USING fresh WHERE {same_bucket}")
    con.execute(f"INSERT INTO {fold.folded} SELECT {keys}, bucket_ts, sum({fold.count}), {', '.join(fold.merge)} "
                f"FROM fresh GROUP BY {keys}, bucket_ts")
    con.execute(f"DELETE FROM {fold.raw} WHERE ts < ?", [cutoff])
    con.execute("DROP TABLE fresh")
