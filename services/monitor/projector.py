"""From stream messages to table changes: pure Python, no I/O, so it is tested on its own.

Every command and event of CA_LOG lands in `events`, known type or not. A type with a handler
(services/monitor/handlers.py) is also folded into the projected tables, and a session event
moves its session to the status the session fold gives it (services/monitor/session_status.py).
A message that does not parse, or a known type whose payload does not validate, is counted and
kept in `malformed`; it never stops ingestion.
"""

from __future__ import annotations

import json
import typing
from typing import Any

from pydantic import BaseModel, TypeAdapter, ValidationError

from computeall.protocol.commands import Command
from computeall.protocol.events import Event
from computeall.protocol.telemetry import MemorySample, RequestStatus, StepTiming, Telemetry

from . import handlers  # noqa: F401  (registers the handlers)
from .projection import HANDLERS, Batch, Header, Message
from .session_status import ENDED, status_set_by
from .step_metrics import STEP_COLUMNS

__all__ = ["Batch", "Message", "STEP_COLUMNS", "project"]


def _type_names(annotation: Any) -> set[str]:
    """The `type` literals of every model in a (nested, annotated) discriminated union."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return {annotation.model_fields["type"].default}
    names: set[str] = set()
    for arg in typing.get_args(annotation):
        names |= _type_names(arg)
    return names


KNOWN_EVENTS = _type_names(Event)
KNOWN_COMMANDS = _type_names(Command)
_EVENT = TypeAdapter(Event)
_COMMAND = TypeAdapter(Command)
_TELEMETRY = TypeAdapter(Telemetry)


def project(messages: list[Message]) -> Batch:
    batch = Batch()
    for msg in messages:
        batch.positions[msg.stream] = msg.seq
        try:
            if msg.stream == "CA_TEL":
                _telemetry(batch, msg)
            else:
                _log(batch, msg)
        except (ValidationError, ValueError, KeyError, TypeError) as exc:
            batch.malformed.append(
                (msg.stream, msg.seq, msg.subject, str(exc)[:1000], msg.data[:4096].decode("utf-8", "replace"))
            )
    return batch


# -- CA_LOG -------------------------------------------------------------------


def _log(batch: Batch, msg: Message) -> None:
    header = Header.model_validate_json(msg.data)
    if header.payload.get("type") != header.type:
        raise ValueError(f"envelope type {header.type!r} does not match payload type {header.payload.get('type')!r}")
    kind = "command" if ".cmd." in msg.subject else "event"
    if kind == "command":  # `<prefix>.cmd.<user>.session.<sid>`: who sent it is the subject's user, not a field
        header = header.model_copy(update={"actor": msg.subject.split(".")[-3]})
    known, adapter = (KNOWN_COMMANDS, _COMMAND) if kind == "command" else (KNOWN_EVENTS, _EVENT)
    # validate before anything is recorded: a known type with a bad payload is malformed
    payload = adapter.validate_python(header.payload) if header.type in known else None
    batch.events.append(
        (msg.seq, msg.subject, kind, header.id, header.type, header.ts, header.actor, header.session_id,
         # the recorded bytes, not a re-encoding: cheaper, and exactly what the log holds
         msg.data.decode())
    )
    # a type this build does not know stops here: stored above, shown on the timeline, nothing more
    if handler := HANDLERS.get(header.type):  # only known types have one (a test checks)
        handler(batch, header, payload, msg)
    if payload is not None and kind == "event" and ".evt.session." in msg.subject:
        if status := status_set_by(payload):
            _set_status(batch, header, status)
    if header.session_id and kind == "event":
        batch.notices.append(
            (
                f"events:{header.session_id}",
                {"seq": msg.seq, "id": header.id, "type": header.type, "ts": header.ts, "actor": header.actor,
                 "session_id": header.session_id, "payload": header.payload},
            )
        )
    if kind == "event" and (".evt.pnode." in msg.subject or header.type.startswith("PNode")):
        batch.notices.append(("pnodes", {"type": header.type}))


def _set_status(batch: Batch, h: Header, status: str) -> None:
    sets, args = ["status = ?"], [status]
    if status == "running":  # the first time it ran, not the latest resume; why it waited no longer holds
        sets += ["started_ts = coalesce(started_ts, ?)", "reason = NULL"]
        args.append(h.ts)
    if status in ENDED:  # when it first ended: a deletion later keeps it
        sets.append("ended_ts = coalesce(ended_ts, ?)")
        args.append(h.ts)
    batch.ops.append((f"UPDATE sessions SET {', '.join(sets)} WHERE id = ?", [*args, h.session_id]))


# -- CA_TEL -------------------------------------------------------------------


def _telemetry(batch: Batch, msg: Message) -> None:
    sample = _TELEMETRY.validate_json(msg.data)
    if msg.subject.split(".")[-2] != sample.pnode:  # `<prefix>.tel.<pid>.<kind>`: only that PNode may publish it
        raise ValueError(f"telemetry about PNode {sample.pnode!r} published on {msg.subject}")
    if isinstance(sample, MemorySample):
        batch.memory.append(
            (sample.pnode, sample.ts, sample.rss_bytes, sample.gpu_allocated_bytes, sample.gpu_reserved_bytes,
             json.dumps(sample.bytes_by_category), sample.pending_requests)
        )
        last = batch.latest_memory.get(sample.pnode)
        if last is None or last.ts <= sample.ts:
            batch.latest_memory[sample.pnode] = sample
        batch.notices.append(("pnodes", {"type": "MemorySample", "pnode": sample.pnode}))
    elif isinstance(sample, RequestStatus):
        batch.requests.append(
            (sample.pnode, sample.session_id, sample.request, sample.step, sample.state, sample.ts, sample.duration_s)
        )
        batch.notices.append(("pnodes", {"type": "RequestStatus", "pnode": sample.pnode}))
    elif isinstance(sample, StepTiming):
        batch.timings.append(
            (sample.pnode, sample.session_id, sample.step, sample.ts, sample.step_s, sample.compute_s, sample.send_s,
             sample.wait_s, json.dumps(sample.sent_bytes))
        )
        batch.notices.append(("pnodes", {"type": "StepTiming", "pnode": sample.pnode}))
