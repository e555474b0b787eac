"""Charts with one line per name: each PNode's tokens per second and busy share, each VNode group's update ratio.

Both come as `[{name, step, value}]`, one entry per line, steps ascending. A long session is thinned
on the server to at most `max_points` steps, taken at an even stride over the steps that have rows,
so every line keeps the same steps and the lines stay comparable point by point.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import duckdb

from .downsample import MAX_POINTS_LIMIT


@dataclass(frozen=True)
class Source:
    rows: str  # the FROM clause: a table, or tables joined on (session_id, step)
    name: str  # the column that names a line
    value: str  # SQL for a line's value at a step


# a PNode's rows with its step's wall time: per-PNode figures in the session's own unit (wall seconds)
_PNODE_STEPS = "pnode_steps p JOIN steps s USING (session_id, step)"
# tokens that went through the PNode per second of the step's wall time: the session's tokens/s
# when there is one replica (every stage handles every token), a replica's share when there are more
PNODE_THROUGHPUT = Source(_PNODE_STEPS, "pnode", "p.tokens / nullif(s.step_time_s, 0)")
# the share of the step's wall time the PNode spent computing: the busiest stage is the bottleneck
PNODE_BUSY = Source(_PNODE_STEPS, "pnode", "p.compute_s / nullif(s.step_time_s, 0)")
UPDATE_RATIOS = Source("update_ratios", "grp", "ratio")


def named_series(
    cur: duckdb.DuckDBPyConnection, source: Source, session_id: str, from_step: int | None, to_step: int | None,
    max_points: int,
) -> list[dict[str, Any]]:
    lo = -(2**62) if from_step is None else from_step
    hi = 2**62 if to_step is None else to_step
    where = "session_id = ? AND step BETWEEN ? AND ?"
    (steps,) = cur.execute(f"SELECT count(DISTINCT step) FROM {source.rows} WHERE {where}", [session_id, lo, hi]).fetchone()
    stride = max(1, -(-steps // max(1, min(max_points, MAX_POINTS_LIMIT))))
    rows = cur.execute(
        f"""
        WITH kept AS (
            SELECT step FROM (SELECT DISTINCT step FROM {source.rows} WHERE {where})
            QUALIFY (row_number() OVER (ORDER BY step) - 1) % ? = 0
        )
        SELECT {source.name}, step, {source.value} FROM {source.rows}
        WHERE session_id = ? AND step IN (SELECT step FROM kept) ORDER BY {source.name}, step
        """,
        [session_id, lo, hi, stride, session_id],
    ).fetchall()
    lines: dict[str, dict[str, Any]] = {}
    for name, step, value in rows:
        line = lines.setdefault(name, {"name": name, "step": [], "value": []})
        line["step"].append(step)
        line["value"].append(value)
    return list(lines.values())
