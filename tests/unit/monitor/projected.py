"""Events projected into a real DuckDB file, as the monitor's ingest does, for the unit tests."""

from __future__ import annotations

from pydantic import BaseModel

from computeall.monitor import store
from computeall.monitor.db import Database
from computeall.monitor.projector import Message, project
from computeall.protocol.events import EventEnvelope


def apply(db: Database, payloads: list[BaseModel], session_id: str = "s") -> None:
    """Project `payloads`, in order, as session `session_id`'s events into `db`."""
    messages = []
    for seq, payload in enumerate(payloads, 1):
        env = EventEnvelope(session_id=session_id, payload=payload)
        messages.append(Message("CA_LOG", seq, f"ca.evt.session.{session_id}.{env.type}", env.model_dump_json().encode()))
    batch = project(messages)
    db.transaction(lambda con: store.apply(db, con, batch, []))
