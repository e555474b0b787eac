"""Where training was interrupted or changed course, as marks on a session's step charts.

One registry: an event type, the kind of mark it makes, what it says, and the step it names. A
mark stands at the step training went on with when it happened: the step the event names where it
names one (the step aborted, the step whose check caught a PNode, the first step not recorded when
a rollback began), else the steps recorded before it in the log. Read from the `events` table,
which keeps every event whole, so a mark needs no projection of its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import duckdb
from pydantic import BaseModel, ValidationError

from computeall.protocol.events import PNodeQuarantined, Reallocated, RolledBack, SessionResumed, StepAborted

from .projection import type_name


@dataclass(frozen=True)
class Marking:
    kind: str
    model: type[BaseModel]
    text: Callable[[Any], str]
    step: Callable[[Any], int | None] = lambda event: None  # None: the steps recorded before it


def _rolled_back(e: RolledBack) -> str:
    again = f": steps {e.to_step} to {e.from_step - 1} run again" if e.from_step > e.to_step else ""
    return f"rolled back to the checkpoint after {e.to_step} steps{again}"


MARKINGS: dict[str, Marking] = {type_name(m.model): m for m in (
    Marking("resumed", SessionResumed, lambda e: "resumed"),
    Marking("rolled back", RolledBack, _rolled_back, step=lambda e: e.from_step),
    Marking("reallocated", Reallocated, lambda e: f"reallocated ({e.reason}) onto {', '.join(e.pnodes)}"),
    Marking("quarantined", PNodeQuarantined, lambda e: f"{e.pnode} quarantined: {e.reason}", step=lambda e: e.step),
    Marking("aborted", StepAborted, lambda e: f"step {e.step} aborted: {e.reason}", step=lambda e: e.step),
)}


def markers(cur: duckdb.DuckDBPyConnection, sid: str) -> list[dict[str, Any]]:
    """The session's marks in log order (recorded on its own subjects: a quarantine is also on the PNode's)."""
    rows = cur.execute(
        "SELECT e.type, e.ts, e.envelope->'payload', ("
        "  SELECT coalesce(max(CAST(s.envelope->'payload'->>'step' AS BIGINT)) + 1, 0) FROM events s"
        "  WHERE s.session_id = e.session_id AND s.type = 'StepCompleted' AND s.seq < e.seq"
        ") FROM events e WHERE e.session_id = ? AND e.kind = 'event' AND list_contains(?, e.type) "
        "AND e.subject LIKE '%.evt.session.%' ORDER BY e.seq",
        [sid, list(MARKINGS)],
    ).fetchall()
    out = []
    for type_, ts, payload, recorded in rows:
        marking = MARKINGS[type_]
        try:
            event = marking.model.model_validate_json(payload)
        except ValidationError:  # stored by a build whose payload this one reads otherwise: no mark
            continue
        step = marking.step(event)
        out.append({"kind": marking.kind, "step": recorded if step is None else step, "ts": ts, "type": type_,
                    "text": marking.text(event)})
    return out
