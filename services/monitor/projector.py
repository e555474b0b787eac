"""From stream messages to table changes: pure Python, no I/O, so it is tested on its own.

Every command and event of CA_LOG lands in `events`. Types this module knows are folded into
the projected tables. Types that `computeall.protocol.events` does not define yet
(ValidationCompleted, CheckpointCommitted, Paused, Resumed, Stopped, LossScaleChanged,
PNodeLost, Reallocated) are projected by their `type` name from the envelope's JSON, so they
start working the day a service publishes them. A message that does not parse, or a known type
whose payload does not validate, is counted and kept in `malformed`; it never stops ingestion.
"""

from __future__ import annotations

import json
import typing
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError

from computeall.protocol.commands import Command
from computeall.protocol.events import Event
from computeall.protocol.telemetry import MemorySample, RequestStatus, Telemetry


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

# session lifecycle by event type name; the unprefixed names are the ones DESIGN.md lists
_STATUS = {
    "SessionStarted": "running",
    "Resumed": "running",
    "SessionResumed": "running",
    "Paused": "paused",
    "SessionPaused": "paused",
    "Stopped": "stopped",
    "SessionStopped": "stopped",
    "SessionCompleted": "completed",
    "SessionFailed": "failed",
}
_ENDED = {"stopped", "completed", "failed"}


class Header(BaseModel):
    """The envelope read leniently: enough to store any event, known type or not."""

    model_config = ConfigDict(extra="ignore")

    id: str
    type: str
    ts: float
    actor: str = "system"
    session_id: str | None = None
    payload: dict[str, Any]


@dataclass
class Message:
    stream: str
    seq: int
    subject: str
    data: bytes


@dataclass
class Batch:
    """Everything one transaction writes, plus what subscribers hear after it commits."""

    positions: dict[str, int] = field(default_factory=dict)
    malformed: list[tuple] = field(default_factory=list)
    events: list[tuple] = field(default_factory=list)
    # statements in log order for rare, stateful changes (session lifecycle, allocations, pnodes)
    ops: list[tuple[str, list]] = field(default_factory=list)
    steps: dict[tuple[str, int], tuple] = field(default_factory=dict)
    memory: list[tuple] = field(default_factory=list)
    requests: list[tuple] = field(default_factory=list)
    latest_memory: dict[str, MemorySample] = field(default_factory=dict)
    notices: list[tuple[str, dict]] = field(default_factory=list)


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
    known = KNOWN_COMMANDS if kind == "command" else KNOWN_EVENTS
    if header.type in known:
        # validate before anything is recorded: a known type with a bad payload is malformed
        (_COMMAND if kind == "command" else _EVENT).validate_python(header.payload)
    p = header.payload
    batch.events.append(
        (msg.seq, msg.subject, kind, header.id, header.type, header.ts, header.actor, header.session_id,
         # the recorded bytes, not a re-encoding: cheaper, and exactly what the log holds
         msg.data.decode())
    )
    handler = (_COMMANDS if kind == "command" else _EVENTS).get(header.type)
    if handler:
        handler(batch, header, p, msg)
    if header.session_id and kind == "event":
        batch.notices.append(
            (
                f"events:{header.session_id}",
                {"seq": msg.seq, "id": header.id, "type": header.type, "ts": header.ts, "actor": header.actor,
                 "session_id": header.session_id, "payload": p},
            )
        )
    if kind == "event" and (".evt.pnode." in msg.subject or header.type.startswith("PNode")):
        batch.notices.append(("pnodes", {"type": header.type}))


def _create_session_cmd(batch: Batch, h: Header, p: dict, msg: Message) -> None:
    # the command names the owner (its actor) before the orchestrator answers with SessionCreated
    batch.ops.append(
        (
            "INSERT INTO sessions (id, owner, status, config, created_ts) VALUES (?, ?, 'requested', ?, ?) "
            "ON CONFLICT (id) DO NOTHING",
            [h.session_id, h.actor, json.dumps(p.get("config")), h.ts],
        )
    )


def _session_created(batch: Batch, h: Header, p: dict, msg: Message) -> None:
    batch.ops.append(
        (
            "INSERT INTO sessions (id, owner, status, config, created_ts) VALUES (?, ?, 'created', ?, ?) "
            "ON CONFLICT (id) DO UPDATE SET owner = excluded.owner, config = excluded.config, "
            "created_ts = excluded.created_ts, "
            "status = CASE WHEN sessions.status IN ('requested', 'rejected') THEN 'created' ELSE sessions.status END",
            [h.session_id, p["owner"], json.dumps(p["config"]), h.ts],
        )
    )


def _lifecycle(batch: Batch, h: Header, p: dict, msg: Message) -> None:
    status = _STATUS[h.type]
    sets = ["status = ?"]
    args: list[Any] = [status]
    if status == "running":
        sets.append("started_ts = coalesce(started_ts, ?)")
        args.append(h.ts)
    if status in _ENDED:
        sets.append("ended_ts = ?")
        args.append(h.ts)
    if p.get("reason"):
        sets.append("reason = ?")
        args.append(p["reason"])
    if p.get("final_loss") is not None:
        sets.append("last_loss = ?")
        args.append(float(p["final_loss"]))
    batch.ops.append((f"UPDATE sessions SET {', '.join(sets)} WHERE id = ?", [*args, h.session_id]))


def _command_rejected(batch: Batch, h: Header, p: dict, msg: Message) -> None:
    if p["command_type"] == "CreateSession":
        batch.ops.append(
            ("UPDATE sessions SET status = 'rejected', reason = ? WHERE id = ? AND status = 'requested'",
             [p["reason"], h.session_id])
        )


def _allocated(batch: Batch, h: Header, p: dict, msg: Message) -> None:
    sid = h.session_id
    batch.ops.append(
        (
            "INSERT INTO allocations VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
            [sid, msg.seq, h.ts, h.type, json.dumps(p.get("pnodes", [])), p.get("bytes_across_per_step")],
        )
    )
    if "placements" in p:
        batch.ops.append(("DELETE FROM vnodes WHERE session_id = ?", [sid]))
        for pl in p["placements"]:
            batch.ops.append(
                ("INSERT OR REPLACE INTO vnodes VALUES (?, ?, ?, ?, ?, ?)",
                 [sid, pl["vnode"], pl.get("op"), pl["pnode"], pl.get("params"), pl.get("precision")])
            )
    elif "moves" in p:  # a partial reallocation: {vnode: pnode}
        for vnode, pnode in dict(p["moves"]).items():
            batch.ops.append(("UPDATE vnodes SET pnode = ? WHERE session_id = ? AND vnode = ?", [pnode, sid, vnode]))
    if "edges" in p:
        batch.ops.append(("DELETE FROM edges WHERE session_id = ?", [sid]))
        for e in p["edges"]:
            batch.ops.append(("INSERT OR REPLACE INTO edges VALUES (?, ?, ?, ?)", [sid, e["src"], e["dst"], e["bytes_per_step"]]))
    batch.ops.append(
        (
            "UPDATE sessions SET pnodes = coalesce(?, pnodes), bytes_across_per_step = coalesce(?, bytes_across_per_step) "
            "WHERE id = ?",
            [json.dumps(p["pnodes"]) if "pnodes" in p else None, p.get("bytes_across_per_step"), sid],
        )
    )


def _step(batch: Batch, h: Header, p: dict, msg: Message) -> None:
    row = (
        h.session_id, int(p["step"]), h.ts, float(p["loss"]), int(p["tokens"]), float(p["step_time_s"]),
        float(p["lr"]), float(p.get("loss_scale", 1.0)), float(p.get("compute_s", 0.0)), float(p.get("wait_s", 0.0)),
    )
    # a step re-run after a rollback replaces the earlier row: the last one in the log wins
    batch.steps[(h.session_id, row[1])] = row
    batch.notices.append((f"steps:{h.session_id}", dict(zip(STEP_COLUMNS, row))))


STEP_COLUMNS = ("session_id", "step", "ts", "loss", "tokens", "step_time_s", "lr", "loss_scale", "compute_s", "wait_s")


def _validation(batch: Batch, h: Header, p: dict, msg: Message) -> None:
    loss = p.get("loss", p.get("val_loss"))
    batch.ops.append(
        ("INSERT OR REPLACE INTO validations VALUES (?, ?, ?, ?, ?)",
         [h.session_id, int(p["step"]), h.ts, None if loss is None else float(loss), json.dumps(p)])
    )


def _checkpoint(batch: Batch, h: Header, p: dict, msg: Message) -> None:
    batch.ops.append(
        ("INSERT OR REPLACE INTO checkpoints VALUES (?, ?, ?, ?)", [h.session_id, int(p["step"]), h.ts, json.dumps(p)])
    )


def _loss_scale(batch: Batch, h: Header, p: dict, msg: Message) -> None:
    # LossScaleChanged names the scale now in force `new`; older guesses of the name still read
    scale = p.get("new", p.get("loss_scale", p.get("scale")))
    if scale is not None:
        batch.ops.append(("UPDATE sessions SET loss_scale = ? WHERE id = ?", [float(scale), h.session_id]))


def _pnode_joined(batch: Batch, h: Header, p: dict, msg: Message) -> None:
    batch.ops.append(
        (
            "INSERT INTO pnodes (id, host, os_pid, device, memory_bytes, state, joined_ts) VALUES (?, ?, ?, ?, ?, 'live', ?) "
            "ON CONFLICT (id) DO UPDATE SET host = excluded.host, os_pid = excluded.os_pid, device = excluded.device, "
            "memory_bytes = excluded.memory_bytes, state = 'live', joined_ts = excluded.joined_ts, left_ts = NULL",
            [p["pnode"], p["host"], p["os_pid"], p["device"], p["memory_bytes"], h.ts],
        )
    )


def _pnode_gone(state: str):
    def handler(batch: Batch, h: Header, p: dict, msg: Message) -> None:
        batch.ops.append(
            (
                f"INSERT INTO pnodes (id, state, left_ts) VALUES (?, '{state}', ?) "
                "ON CONFLICT (id) DO UPDATE SET state = excluded.state, left_ts = excluded.left_ts",
                [p["pnode"], h.ts],
            )
        )

    return handler


def _dataset(batch: Batch, h: Header, p: dict, msg: Message) -> None:
    name = p.get("name") or msg.subject.split(".")[-2]
    batch.ops.append(
        (
            "INSERT INTO datasets VALUES (?, ?, ?) ON CONFLICT (name) DO UPDATE SET ts = excluded.ts, "
            "detail = json_merge_patch(datasets.detail, excluded.detail)",
            [name, h.ts, json.dumps(p)],
        )
    )


_COMMANDS = {"CreateSession": _create_session_cmd}
_EVENTS = {
    "SessionCreated": _session_created,
    **{name: _lifecycle for name in _STATUS},
    "CommandRejected": _command_rejected,
    "Allocated": _allocated,
    "Reallocated": _allocated,
    "StepCompleted": _step,
    "ValidationCompleted": _validation,
    "CheckpointCommitted": _checkpoint,
    "LossScaleChanged": _loss_scale,
    "PNodeJoined": _pnode_joined,
    "PNodeLeft": _pnode_gone("left"),
    "PNodeLost": _pnode_gone("lost"),
    "DatasetCreated": _dataset,
    "TokenizerTrained": _dataset,
    "Tokenized": _dataset,
    "SplitCreated": _dataset,
}


# -- CA_TEL -------------------------------------------------------------------


def _telemetry(batch: Batch, msg: Message) -> None:
    sample = _TELEMETRY.validate_json(msg.data)
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
