"""Each PNode's role in the caller's sessions that are not over, as their current allocations say.

A stage is a contiguous cut of the network's order (placements are recorded in that order, per
replica), so a replica's stages are its PNodes in the order their first VNode appears. A PNode the
allocation names among its `standbys` is a standby (offered to the session, another stage would not
have made its steps faster, it takes over a lost PNode's stage); any other is idle, and the card says
why from what the log shows: it joined after the session was placed (and when the session takes new
PNodes), it was quarantined or lost, or the session was placed without it.
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any, Literal

import duckdb
from pydantic import BaseModel

from computeall.protocol.config import SessionConfig
from computeall.protocol.events import Allocated, Reallocated

from .session_status import ENDED

RoleKind = Literal["stage", "standby", "idle"]


class Role(BaseModel):
    session_id: str
    kind: RoleKind
    replica: int | None = None
    stage: int | None = None  # 0-based, along its replica's pipeline
    stages: int | None = None
    replicas: int
    vnodes: list[str] = []
    why: str


class Placed(BaseModel):
    """One session's current allocation, as the roles need it."""

    session_id: str
    ts: float
    reason: str  # why this allocation: the session started, or the Reallocated's reason
    pnodes: list[str]
    standbys: list[str]
    replicas: int
    # replica -> its PNodes in pipeline order, each with its VNodes in the network's order
    pipelines: dict[int, dict[str, list[str]]]
    rebalance: str
    checkpoint_every: int


def role(placed: Placed, pnode: str, joined_at: float | None, state: str) -> Role:
    sid = placed.session_id
    for replica, stages in placed.pipelines.items():
        if pnode in stages:
            vnodes = stages[pnode]
            stage = list(stages).index(pnode)
            span = vnodes[0] if len(vnodes) == 1 else f"{vnodes[0]} to {vnodes[-1]} ({len(vnodes)} VNodes)"
            return Role(session_id=sid, kind="stage", replica=replica, stage=stage, stages=len(stages),
                        replicas=placed.replicas, vnodes=vnodes,
                        why=f"hosts {span}; placed {placed.reason}")
    if pnode in placed.standbys:
        return Role(session_id=sid, kind="standby", replicas=placed.replicas,
                    why=f"standby of session {sid}: another stage would not make its steps faster; "
                        "it takes over the stage of a PNode the session loses")
    return Role(session_id=sid, kind="idle", replicas=placed.replicas, why=_idle_because(placed, joined_at, state))


def _idle_because(placed: Placed, joined_at: float | None, state: str) -> str:
    sid = placed.session_id
    if state != "live":
        return f"{state}: session {sid} was placed on {', '.join(placed.pnodes)} without it"
    if joined_at is not None and joined_at > placed.ts:
        if placed.rebalance == "on-failure":
            return f"joined after session {sid} was placed; it takes new PNodes only after a failure (rebalance: on-failure)"
        if not placed.checkpoint_every:
            return (f"joined after session {sid} was placed; it takes new PNodes at a checkpoint, and it saves one "
                    f"only when it pauses or ends (checkpoint_every: 0)")
        return (f"joined after session {sid} was placed; it is considered at the session's next checkpoint "
                f"(every {placed.checkpoint_every} steps) and placed there if that makes steps faster")
    return f"session {sid} was placed on {', '.join(placed.pnodes)} without it"


def current_allocations(cur: duckdb.DuckDBPyConnection, owner: str) -> list[Placed]:
    """The newest (re)allocation of each of `owner`'s sessions that are not over."""
    rows = cur.execute(
        "SELECT s.id, s.config, e.seq, e.ts, e.envelope->'payload' FROM sessions s JOIN events e ON e.session_id = s.id "
        "WHERE s.owner = ? AND NOT list_contains(?, s.status) AND e.seq = (SELECT max(seq) FROM events "
        "  WHERE session_id = s.id AND kind = 'event' AND type IN ('Allocated', 'Reallocated')) ORDER BY s.id",
        [owner, list(ENDED)],
    ).fetchall()
    return [_placed(sid, config, seq, ts, payload) for sid, config, seq, ts, payload in rows]


@lru_cache(maxsize=256)
def _placed(sid: str, config: str | None, seq: int, ts: float, payload: str) -> Placed:
    """Parsed once per allocation (a page of PNode cards asks for each card)."""
    data = json.loads(payload)
    allocation = (Reallocated if data.get("type") == "Reallocated" else Allocated).model_validate(data)
    pipelines: dict[int, dict[str, list[str]]] = {}
    for p in allocation.placements:  # recorded in the network's order, replica by replica
        pipelines.setdefault(p.replica, {}).setdefault(p.pnode, []).append(p.vnode)
    reason = f"again after: {allocation.reason}" if isinstance(allocation, Reallocated) else "when the session (re)started"
    return Placed(session_id=sid, ts=ts, reason=reason, pnodes=allocation.pnodes, standbys=allocation.standbys,
                  replicas=allocation.replicas, pipelines=dict(sorted(pipelines.items())), **_settings(config))


def _settings(config: str | None) -> dict[str, Any]:
    defaults = SessionConfig.model_fields
    raw = json.loads(config) if config else {}
    return {"rebalance": raw.get("rebalance", defaults["rebalance"].default),
            "checkpoint_every": raw.get("checkpoint_every", defaults["checkpoint_every"].default)}
