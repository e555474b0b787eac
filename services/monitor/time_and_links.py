"""Where PNodes' time goes and what crosses their links, from the StepTiming telemetry of recent steps.

A PNode's time share is over its last steps (RunStep arriving to ApplyStep done): the fraction
computing, sending and waiting for inputs (the bubble). Sending overlaps computing when the
outbox sends while the next item computes, so the three need not add up to one.

A link is an ordered pair of PNodes that exchanged tensors: the bytes per step the first sent
the second (their mean over the session's last steps), and what the pair can carry: a tensor
goes up the sender's link to NATS and down the receiver's, so the slower of the two bandwidths
each PNode measured, and half of each round trip.
"""

from __future__ import annotations

import json
from typing import Any

import duckdb

RECENT_STEPS = 20


def time_shares(cur: duckdb.DuckDBPyConnection, pnodes: list[str], owner: str,
                last_steps: int) -> dict[str, dict[str, Any]]:
    """Each PNode's last steps of the caller's sessions: shares of their time, and bytes sent per step
    (PNodes without such steps: absent)."""
    rows = cur.execute(
        "SELECT pnode, step_s, compute_s, send_s, wait_s, sent_bytes FROM ("
        "  SELECT t.*, row_number() OVER (PARTITION BY t.pnode ORDER BY t.ts DESC) AS recent FROM step_timings t "
        "  JOIN sessions s ON s.id = t.session_id WHERE list_contains(?, t.pnode) AND s.owner = ?"
        ") WHERE recent <= ?",
        [pnodes, owner, last_steps],
    ).fetchall()
    by_pnode: dict[str, list[tuple]] = {}
    for pnode, *timing in rows:
        by_pnode.setdefault(pnode, []).append(timing)
    return {pnode: share for pnode, timings in by_pnode.items() if (share := _share(timings))}


def _share(rows: list[tuple]) -> dict[str, Any] | None:
    total = sum(r[0] for r in rows)
    if total <= 0:
        return None
    return {
        "steps": len(rows),
        "step_s": total / len(rows),
        "compute": sum(r[1] for r in rows) / total,
        "send": sum(r[2] for r in rows) / total,
        "wait": sum(r[3] for r in rows) / total,
        "sent_bytes_per_step": sum(sum(json.loads(r[4]).values()) for r in rows) / len(rows),
    }


def session_links(cur: duckdb.DuckDBPyConnection, sid: str, throughput: dict[str, dict | None],
                  last_steps: int = RECENT_STEPS) -> list[dict[str, Any]]:
    """Every (sender, receiver) pair of the session's last steps, with bytes per step and the pair's capacity."""
    rows = cur.execute(
        "SELECT pnode, sent_bytes FROM step_timings WHERE session_id = ? AND step >= "
        "(SELECT max(step) FROM step_timings WHERE session_id = ?) - ? + 1",
        [sid, sid, last_steps],
    ).fetchall()
    steps: dict[str, int] = {}
    sent: dict[tuple[str, str], int] = {}
    for src, sent_json in rows:
        steps[src] = steps.get(src, 0) + 1
        for dst, nbytes in json.loads(sent_json).items():
            sent[(src, dst)] = sent.get((src, dst), 0) + nbytes
    return [
        {"src": src, "dst": dst, "bytes_per_step": nbytes / steps[src], **capacity(throughput, src, dst)}
        for (src, dst), nbytes in sorted(sent.items())
    ]


def capacity(throughput: dict[str, dict | None], src: str, dst: str) -> dict[str, float | None]:
    """What a tensor from `src` to `dst` can get: the slower link's bandwidth, one way's latency."""
    a, b = throughput.get(src), throughput.get(dst)
    if not a or not b:
        return {"bandwidth_bytes_per_s": None, "latency_s": None}
    return {
        "bandwidth_bytes_per_s": min(a["bandwidth_bytes_per_s"], b["bandwidth_bytes_per_s"]),
        "latency_s": (a["rtt_s"] + b["rtt_s"]) / 2,
    }
