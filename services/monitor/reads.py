"""Read queries behind the GraphQL resolvers: plain functions of a DuckDB cursor.

Every session-scoped read takes the owner, so a key can never reach another user's rows:
someone else's session reads exactly like a missing one.
"""

from __future__ import annotations

import json
import time
from typing import Any

import duckdb

from . import network_edges, time_and_links
from .session_status import HIDDEN

SESSION_FIELDS = (
    "id", "owner", "status", "config", "created_at", "started_at", "ended_at", "step", "last_loss", "tokens",
    "tokens_per_s", "loss_scale", "reason", "pnodes", "bytes_across_per_step", "replicas",
)
SESSION_SQL = (
    "SELECT id, owner, status, config, created_ts, started_ts, ended_ts, coalesce(step, 0), last_loss, tokens, tokens_per_s, "
    "loss_scale, reason, pnodes, bytes_across_per_step, replicas FROM sessions "
    "WHERE NOT list_contains(?, status)"  # HIDDEN: a deleted session reads as a missing one
)
PNODE_FIELDS = (
    "id", "host", "os_pid", "device", "memory_bytes", "state", "joined_at", "left_at", "last_heartbeat", "rss_bytes",
    "gpu_allocated_bytes", "gpu_reserved_bytes", "bytes_by_category", "pending_requests", "hosted_v_nodes",
    "throughput", "quarantined_at", "quarantine_reason", "vnode_memory",
)
CHECK_COUNTS = ("passed", "failed", "abandoned")


def _rows(cur: duckdb.DuckDBPyConnection, fields: tuple[str, ...], sql: str, args: list) -> list[dict[str, Any]]:
    return [dict(zip(fields, row)) for row in cur.execute(sql, args).fetchall()]


def _session(row: dict[str, Any]) -> dict[str, Any]:
    row["config"] = json.loads(row["config"]) if row["config"] else None
    row["pnodes"] = json.loads(row["pnodes"]) if row["pnodes"] else []
    config = row["config"] if isinstance(row["config"], dict) else {}
    row["planned_steps"] = config.get("steps")
    row["verifies"] = (config.get("replay_of") or {}).get("session_id")  # a `replay verify` run: of which session
    return row


def sessions(cur: duckdb.DuckDBPyConnection, owner: str, limit: int) -> list[dict[str, Any]]:
    rows = _rows(cur, SESSION_FIELDS, f"{SESSION_SQL} AND owner = ? ORDER BY created_ts DESC LIMIT ?",
                 [list(HIDDEN), owner, limit])
    return [_session(r) for r in rows]


def session(cur: duckdb.DuckDBPyConnection, owner: str, sid: str) -> dict[str, Any] | None:
    rows = _rows(cur, SESSION_FIELDS, f"{SESSION_SQL} AND owner = ? AND id = ?", [list(HIDDEN), owner, sid])
    return _session(rows[0]) if rows else None


def owns(cur: duckdb.DuckDBPyConnection, owner: str, sid: str) -> bool:
    return cur.execute("SELECT 1 FROM sessions WHERE owner = ? AND id = ?", [owner, sid]).fetchone() is not None


def owner(cur: duckdb.DuckDBPyConnection, sid: str) -> str | None:
    """Whose session `sid` is; None while the monitor has not projected it (or never will)."""
    row = cur.execute("SELECT owner FROM sessions WHERE id = ?", [sid]).fetchone()
    return row[0] if row else None


def validations(cur: duckdb.DuckDBPyConnection, sid: str) -> list[dict[str, Any]]:
    rows = _rows(cur, ("step", "ts", "loss", "detail"),
                 "SELECT step, ts, loss, detail FROM validations WHERE session_id = ? ORDER BY step", [sid])
    for r in rows:
        r["detail"] = json.loads(r["detail"])
    return rows


def samples(cur: duckdb.DuckDBPyConnection, sid: str, limit: int) -> list[dict[str, Any]]:
    """The newest `limit` steps that have samples, newest first, each with its samples in prompt order."""
    rows = _rows(cur, ("step", "ts", "prompt", "text", "tokens"),
                 "SELECT step, ts, prompt, text, tokens FROM samples WHERE session_id = ? AND step IN "
                 "(SELECT DISTINCT step FROM samples WHERE session_id = ? ORDER BY step DESC LIMIT ?) "
                 "ORDER BY step DESC, idx", [sid, sid, limit])
    out: list[dict[str, Any]] = []
    for r in rows:
        if not out or out[-1]["step"] != r["step"]:
            out.append({"step": r["step"], "ts": r["ts"], "texts": []})
        out[-1]["texts"].append({"prompt": r["prompt"], "text": r["text"], "tokens": r["tokens"]})
    return out


def checkpoints(cur: duckdb.DuckDBPyConnection, sid: str) -> list[dict[str, Any]]:
    rows = _rows(cur, ("step", "ts", "detail"),
                 "SELECT step, ts, detail FROM checkpoints WHERE session_id = ? ORDER BY step", [sid])
    for r in rows:
        r["detail"] = json.loads(r["detail"])
    return rows


def events(
    cur: duckdb.DuckDBPyConnection, sid: str, after: int, limit: int, types: list[str] | None,
    exclude_types: list[str] | None = None,
) -> list[dict]:
    sql = "SELECT seq, id, type, ts, actor, session_id, envelope->'payload' FROM events WHERE session_id = ? AND kind = 'event' AND seq > ?"
    args: list[Any] = [sid, after]
    if types:
        sql += " AND list_contains(?, type)"
        args.append(types)
    if exclude_types:
        sql += " AND NOT list_contains(?, type)"
        args.append(exclude_types)
    rows = _rows(cur, ("seq", "id", "type", "ts", "actor", "session_id", "payload"), f"{sql} ORDER BY seq LIMIT ?", [*args, limit])
    for r in rows:
        r["payload"] = json.loads(r["payload"])
    return rows


def topology(cur: duckdb.DuckDBPyConnection, sid: str, heartbeat_timeout_s: float, owner: str,
             replica: int = 0) -> dict[str, Any]:
    """One replica's VNodes and edges (every replica places the whole network), and the PNodes of all
    with their time shares (one query for all of them: a session may span hundreds)."""
    vnodes = _rows(cur, ("id", "op", "params", "precision", "pnode", "replica"),
                   "SELECT vnode, op, params, precision, pnode, replica FROM vnodes WHERE session_id = ? AND replica = ? "
                   "ORDER BY vnode", [sid, replica])
    recorded = _rows(cur, ("src", "dst", "bytes_per_step"),
                     "SELECT src, dst, bytes_per_step FROM edges WHERE session_id = ? AND replica = ? ORDER BY src, dst",
                     [sid, replica])
    replicas = _rows(cur, ("index", "pnodes"),
                     "SELECT replica, list(DISTINCT pnode ORDER BY pnode) FROM vnodes WHERE session_id = ? "
                     "GROUP BY replica ORDER BY replica", [sid])
    row = cur.execute("SELECT config FROM sessions WHERE id = ?", [sid]).fetchone()
    config = json.loads(row[0]) if row and row[0] else None
    edges = network_edges.all_edges(config, {v["id"]: v["pnode"] for v in vnodes}, recorded)
    allocations = _rows(cur, ("seq", "ts", "type", "pnodes", "bytes_across_per_step"),
                        "SELECT seq, ts, type, pnodes, bytes_across_per_step FROM allocations WHERE session_id = ? ORDER BY seq",
                        [sid])
    for a in allocations:
        a["pnodes"] = json.loads(a["pnodes"])
    hosts = sorted({p for r in replicas for p in r["pnodes"]} | {p for a in allocations[-1:] for p in a["pnodes"]})
    hosting = [p for p in pnodes(cur, heartbeat_timeout_s, owner) if p["id"] in hosts]
    shares = time_and_links.time_shares(cur, hosts, owner, time_and_links.RECENT_STEPS)
    for p in hosting:
        p["time_share"] = shares.get(p["id"])
    throughput = {p["id"]: p["throughput"] for p in hosting}
    where = {v["id"]: v["pnode"] for v in vnodes}
    for e in edges:  # a crossing edge's tensors go over the link between its two PNodes
        link = time_and_links.capacity(throughput, where[e["src"]], where[e["dst"]]) if e["crosses"] else {}
        e["link_bandwidth_bytes_per_s"] = link.get("bandwidth_bytes_per_s")
    return {
        "session_id": sid,
        "replica": replica,
        "replicas": replicas,
        "vnodes": vnodes,
        "edges": edges,
        "links": time_and_links.session_links(cur, sid, throughput),
        "allocations": allocations,
        "bytes_across_per_step": allocations[-1]["bytes_across_per_step"] if allocations else None,
        "pnodes": hosting,
    }


def pnodes(cur: duckdb.DuckDBPyConnection, heartbeat_timeout_s: float, owner: str) -> list[dict[str, Any]]:
    """Every PNode, with its spot checks over `owner`'s sessions (one query for all: hundreds of PNodes
    are listed every second to each open PNodes page)."""
    checks = pnode_checks(cur, owner)
    rows = _rows(
        cur, PNODE_FIELDS,
        "SELECT id, host, os_pid, device, memory_bytes, state, joined_ts, left_ts, last_heartbeat, rss_bytes, "
        "gpu_allocated_bytes, gpu_reserved_bytes, bytes_by_category, pending_requests, hosted_vnodes, throughput, "
        "quarantined_ts, quarantine_reason, vnode_memory FROM pnodes ORDER BY id",
        [],
    )
    own = {sid for (sid,) in cur.execute("SELECT id FROM sessions WHERE owner = ?", [owner]).fetchall()}
    now = time.time()
    for r in rows:
        # another user's sessions are not the caller's to see, their VNodes' memory included
        r["vnode_memory"] = [m for m in json.loads(r["vnode_memory"] or "[]") if m["session_id"] in own]
        r["bytes_by_category"] = json.loads(r["bytes_by_category"]) if r["bytes_by_category"] else None
        r["hosted_v_nodes"] = json.loads(r["hosted_v_nodes"]) if r["hosted_v_nodes"] else []
        r["throughput"] = json.loads(r["throughput"]) if r["throughput"] else None
        r["heartbeat_age_s"] = now - r["last_heartbeat"] if r["last_heartbeat"] else None
        r["state"] = r["state"] or "live"
        r["checks"] = checks.get(r["id"], dict.fromkeys(CHECK_COUNTS, 0))
        # liveness is the heartbeat's to say: an event may not have been written yet for a dead PNode
        if r["state"] == "live" and r["heartbeat_age_s"] is not None and r["heartbeat_age_s"] > heartbeat_timeout_s:
            r["state"] = "lost"
        if r["quarantined_at"] is not None:
            r["state"] = "quarantined"  # whether or not it still heartbeats, it gets no work
    return rows


def pnode_checks(cur: duckdb.DuckDBPyConnection, owner: str) -> dict[str, dict[str, int]]:
    """Spot checks of each PNode's results, over the caller's sessions only (PNodes without any: absent)."""
    rows = cur.execute(
        "SELECT c.pnode, sum(c.passed), sum(c.failed), sum(c.abandoned) FROM checks c "
        "JOIN sessions s ON s.id = c.session_id WHERE s.owner = ? GROUP BY c.pnode", [owner],
    ).fetchall()
    return {pnode: dict(zip(CHECK_COUNTS, map(int, counts))) for pnode, *counts in rows}


def session_checks(cur: duckdb.DuckDBPyConnection, sid: str) -> list[dict[str, Any]]:
    return _rows(cur, ("pnode", *CHECK_COUNTS),
                 "SELECT pnode, passed, failed, abandoned FROM checks WHERE session_id = ? ORDER BY pnode", [sid])


def memory(cur: duckdb.DuckDBPyConnection, pnode: str, since: float | None) -> list[dict[str, Any]]:
    since = since or 0.0
    return _rows(
        cur,
        ("ts", "rss_bytes", "rss_max_bytes", "gpu_allocated_bytes", "gpu_reserved_bytes", "pending_requests", "samples"),
        "SELECT bucket_ts, rss_avg, rss_max, gpu_allocated_max, gpu_reserved_max, pending_avg, samples "
        "FROM memory_samples_agg WHERE pnode = ? AND bucket_ts >= ? "
        "UNION ALL SELECT ts, rss_bytes, rss_bytes, gpu_allocated_bytes, gpu_reserved_bytes, pending_requests, 1 "
        "FROM memory_samples WHERE pnode = ? AND ts >= ? ORDER BY 1",
        [pnode, since, pnode, since],
    )


def requests(cur: duckdb.DuckDBPyConnection, pnode: str, owner: str, limit: int) -> list[dict[str, Any]]:
    # only requests of the caller's own sessions: a shared PNode must not leak others' work
    return _rows(
        cur, ("session_id", "request", "step", "state", "ts", "duration_s"),
        "SELECT r.session_id, r.request, r.step, r.state, r.ts, r.duration_s FROM requests r "
        "JOIN sessions s ON s.id = r.session_id WHERE r.pnode = ? AND s.owner = ? ORDER BY r.ts DESC LIMIT ?",
        [pnode, owner, limit],
    )


def stats(cur: duckdb.DuckDBPyConnection) -> dict[str, Any]:
    rows = cur.execute("SELECT stream, seq, malformed FROM positions").fetchall()
    (events_count,) = cur.execute("SELECT count(*) FROM events").fetchone()
    return {
        "positions": {s: seq for s, seq, _ in rows},
        "malformed": sum(m for _, _, m in rows),
        "events": events_count,
    }


def user_keys(cur: duckdb.DuckDBPyConnection, user: str) -> list[dict[str, Any]]:
    return _rows(cur, ("id", "label", "created_at", "revoked_at"),
                 "SELECT id, label, created_ts, revoked_ts FROM api_keys WHERE user_name = ? ORDER BY created_ts", [user])
