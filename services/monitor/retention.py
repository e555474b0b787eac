"""Telemetry retention: recent samples stay raw, older ones are folded into fixed buckets.

PNodes sample every few seconds for as long as a session runs, so raw rows alone would grow
without bound. Folding keeps what charts of a long session need (per-bucket average and
maximum memory, request counts and durations) at a fixed cost per bucket, and folded rows
past `telemetry_keep_s` are dropped. The cutoff is aligned to a bucket boundary, so a bucket
is folded once, when all of it is older than the raw window.
"""

from __future__ import annotations

import math

import duckdb


def compact(con: duckdb.DuckDBPyConnection, now: float, raw_s: float, bucket_s: float, keep_s: float) -> None:
    cutoff = math.floor((now - raw_s) / bucket_s) * bucket_s
    bucket = f"floor(ts / {bucket_s}) * {bucket_s}"
    con.execute(
        f"INSERT INTO memory_samples_agg SELECT pnode, {bucket}, count(*), avg(rss_bytes), max(rss_bytes), "
        "max(gpu_allocated_bytes), max(gpu_reserved_bytes), avg(pending_requests), max(pending_requests) "
        "FROM memory_samples WHERE ts < ? GROUP BY ALL",
        [cutoff],
    )
    con.execute("DELETE FROM memory_samples WHERE ts < ?", [cutoff])
    con.execute(
        f"INSERT INTO requests_agg SELECT pnode, session_id, request, state, {bucket}, count(*), avg(duration_s), "
        "max(duration_s) FROM requests WHERE ts < ? GROUP BY ALL",
        [cutoff],
    )
    con.execute("DELETE FROM requests WHERE ts < ?", [cutoff])
    # step timings answer "where did the last steps' time go": nothing older is asked for
    con.execute("DELETE FROM step_timings WHERE ts < ?", [cutoff])
    con.execute("DELETE FROM memory_samples_agg WHERE bucket_ts < ?", [now - keep_s])
    con.execute("DELETE FROM requests_agg WHERE bucket_ts < ?", [now - keep_s])
