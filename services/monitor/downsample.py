"""Server-side downsampling of step metrics that keeps extremes.

The step range is cut into `maxPoints / 2` equal buckets and each bucket contributes the two
steps where the chosen metric is lowest and highest. A loss spike, however short, therefore
still shows on a chart of 100,000 steps drawn with 1,000 points, which an average or a stride
would hide. Done in one DuckDB query, so the rows never travel through Python unreduced.
"""

from __future__ import annotations

from typing import Any

import duckdb

from .step_metrics import STEP_FIELDS

# the metric whose extremes each bucket keeps (GraphQL enum StepMetric -> SQL)
METRICS = {
    "LOSS": "loss",
    "STEP_TIME": "step_time_s",
    "TOKENS_PER_S": "tokens / nullif(step_time_s, 0)",
    "LR": "lr",
    "LOSS_SCALE": "loss_scale",
    "GRAD_NORM": "grad_norm",
}
MAX_POINTS_LIMIT = 20_000


def steps(
    cur: duckdb.DuckDBPyConnection,
    session_id: str,
    from_step: int | None,
    to_step: int | None,
    max_points: int | None,
    metric: str = "LOSS",
) -> dict[str, list[Any]]:
    lo = -(2**62) if from_step is None else from_step
    hi = 2**62 if to_step is None else to_step
    cols = ", ".join(STEP_FIELDS)
    where = "session_id = ? AND step BETWEEN ? AND ?"
    n, first, last = cur.execute(f"SELECT count(*), min(step), max(step) FROM steps WHERE {where}", [session_id, lo, hi]).fetchone()
    limit = min(max_points or MAX_POINTS_LIMIT, MAX_POINTS_LIMIT)
    if n <= limit:
        rows = cur.execute(f"SELECT {cols} FROM steps WHERE {where} ORDER BY step", [session_id, lo, hi]).fetchall()
    else:
        buckets = max(1, limit // 2)
        # one scan: each bucket's lowest and highest row come out whole, as structs
        picks = cur.execute(
            f"""
            SELECT arg_min(({cols}), m), arg_max(({cols}), m)
            FROM (SELECT {cols}, {METRICS[metric]} AS m FROM steps WHERE {where})
            GROUP BY (step - ?) * ? // (? - ? + 1)
            """,
            [session_id, lo, hi, first, buckets, last, first],
        ).fetchall()
        rows = sorted({tuple(row.values()) if isinstance(row, dict) else row for pair in picks for row in pair})
    columns = list(zip(*rows)) or [()] * len(STEP_FIELDS)
    return {name: list(values) for name, values in zip(STEP_FIELDS, columns)}
