"""One projection per command or event type the monitor shows, registered by its model.

Each handler turns one typed, validated message into rows of the batch. Session status is not
set here: services/monitor/projector.py takes it from the session fold for every event. JSON
columns (config, detail) keep the payload exactly as recorded, not a re-encoding with defaults.
"""

from __future__ import annotations

import json

from computeall.protocol.commands import CreateSession
from computeall.protocol.events import (
    Allocated, CheckpointCommitted, ChecksCompleted, CommandRejected, DatasetCreated, DatasetShared, LossScaleChanged, PNodeJoined,
    PNodeLeft, PNodeLost, PNodeQuarantined, Reallocated, ResultsDiscarded, SamplesGenerated, SessionCompleted,
    SessionCreated, SessionFailed, SessionPaused, SessionQueued, SessionResumed, SplitCreated, StepCompleted, Tokenized,
    TokenizerTrained,
    UpdateRatios, ValidationCompleted,
)

from .projection import Batch, Header, Message, projects, type_name
from .session_status import INITIAL
from .step_metrics import COUNT_STEPS_COMPLETED, STEP_COLUMNS, STEP_FIELDS

# -- sessions -----------------------------------------------------------------


@projects(CreateSession)
def create_session(batch: Batch, h: Header, p: CreateSession, msg: Message) -> None:
    # the command names the owner (its actor) before the orchestrator answers with SessionCreated
    batch.ops.append(
        (
            "INSERT INTO sessions (id, owner, status, config, created_ts) VALUES (?, ?, ?, ?, ?) "
            "ON CONFLICT (id) DO NOTHING",
            [h.session_id, h.actor, INITIAL, json.dumps(h.payload["config"]), h.ts],
        )
    )


@projects(SessionCreated)
def session_created(batch: Batch, h: Header, p: SessionCreated, msg: Message) -> None:
    batch.ops.append(
        (
            "INSERT INTO sessions (id, owner, status, config, created_ts) VALUES (?, ?, ?, ?, ?) "
            "ON CONFLICT (id) DO UPDATE SET owner = excluded.owner, config = excluded.config, "
            "created_ts = excluded.created_ts",
            [h.session_id, p.owner, INITIAL, json.dumps(h.payload["config"]), h.ts],
        )
    )


@projects(CommandRejected)
def command_rejected(batch: Batch, h: Header, p: CommandRejected, msg: Message) -> None:
    # a refused CreateSession leaves the session as it was before: new, now with the reason why
    if p.command_type == type_name(CreateSession):
        batch.ops.append(
            ("UPDATE sessions SET reason = ? WHERE id = ? AND status = ?", [p.reason, h.session_id, INITIAL])
        )


@projects(SessionPaused, SessionQueued, SessionResumed, SessionFailed)
def session_reason(batch: Batch, h: Header, p: SessionPaused | SessionQueued | SessionResumed | SessionFailed,
                   msg: Message) -> None:
    # why it stands where it is now, as the fold's pause_reason, queue_reason and failure: a resume clears it
    batch.ops.append(("UPDATE sessions SET reason = ? WHERE id = ?", [getattr(p, "reason", None), h.session_id]))


@projects(SessionCompleted)
def session_completed(batch: Batch, h: Header, p: SessionCompleted, msg: Message) -> None:
    if p.final_loss is not None:
        batch.ops.append(("UPDATE sessions SET last_loss = ? WHERE id = ?", [p.final_loss, h.session_id]))


@projects(Allocated, Reallocated)
def allocated(batch: Batch, h: Header, p: Allocated, msg: Message) -> None:
    sid = h.session_id
    batch.ops += [
        ("INSERT INTO allocations VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
         [sid, msg.seq, h.ts, h.type, json.dumps(p.pnodes), p.bytes_across_per_step]),
        ("DELETE FROM vnodes WHERE session_id = ?", [sid]),
        *(("INSERT OR REPLACE INTO vnodes (session_id, replica, vnode, op, pnode, params, precision) "
           "VALUES (?, ?, ?, ?, ?, ?, ?)",
           [sid, pl.replica, pl.vnode, pl.op, pl.pnode, pl.params, pl.precision]) for pl in p.placements),
        ("DELETE FROM edges WHERE session_id = ?", [sid]),
        *(("INSERT OR REPLACE INTO edges (session_id, replica, src, dst, bytes_per_step) VALUES (?, ?, ?, ?, ?)",
           [sid, e.replica, e.src, e.dst, e.bytes_per_step]) for e in p.edges),
        ("UPDATE sessions SET pnodes = ?, bytes_across_per_step = ?, replicas = ? WHERE id = ?",
         [json.dumps(p.pnodes), p.bytes_across_per_step, p.replicas, sid]),
    ]


_METRICS_AFTER_TS = STEP_FIELDS[2:]  # step and ts come first (see step_metrics)


@projects(StepCompleted)
def step_completed(batch: Batch, h: Header, p: StepCompleted, msg: Message) -> None:
    row = (h.session_id, p.step, h.ts, *(getattr(p, name) for name in _METRICS_AFTER_TS))
    # a step re-run after a rollback replaces the earlier row: the last one in the log wins
    batch.steps[(h.session_id, p.step)] = row
    batch.notices.append((f"steps:{h.session_id}", dict(zip(STEP_COLUMNS, row))))
    if p.compute_s_by_pnode:
        # the tokens that went through each PNode: every stage of a pipeline sees all of its replica's,
        # and the replicas (on disjoint PNodes) share the step's equally; the allocation in force is the
        # session row's, since ops run in log order
        pnodes = sorted(p.compute_s_by_pnode)
        batch.ops.append((
            "INSERT OR REPLACE INTO pnode_steps SELECT ?, ?, UNNEST(?::VARCHAR[]), UNNEST(?::DOUBLE[]), "
            "?::BIGINT // coalesce((SELECT replicas FROM sessions WHERE id = ?), 1)",
            [h.session_id, p.step, pnodes, [p.compute_s_by_pnode[n] for n in pnodes], p.tokens, h.session_id],
        ))


@projects(UpdateRatios)
def update_ratios(batch: Batch, h: Header, p: UpdateRatios, msg: Message) -> None:
    groups = sorted(p.ratios)
    batch.ops.append((
        "INSERT OR REPLACE INTO update_ratios SELECT ?, ?, UNNEST(?::VARCHAR[]), UNNEST(?::DOUBLE[])",
        [h.session_id, p.step, groups, [p.ratios[g] for g in groups]],
    ))


@projects(ValidationCompleted)
def validation_completed(batch: Batch, h: Header, p: ValidationCompleted, msg: Message) -> None:
    batch.ops.append(
        ("INSERT OR REPLACE INTO validations VALUES (?, ?, ?, ?, ?)",
         [h.session_id, p.step, h.ts, p.loss, json.dumps(h.payload)])
    )


@projects(SamplesGenerated)
def samples_generated(batch: Batch, h: Header, p: SamplesGenerated, msg: Message) -> None:
    batch.ops += [
        ("INSERT OR REPLACE INTO samples VALUES (?, ?, ?, ?, ?, ?, ?)",
         [h.session_id, p.step, i, h.ts, s.prompt, s.text, s.tokens])
        for i, s in enumerate(p.samples)
    ]


@projects(CheckpointCommitted)
def checkpoint_committed(batch: Batch, h: Header, p: CheckpointCommitted, msg: Message) -> None:
    batch.ops.append(
        ("INSERT OR REPLACE INTO checkpoints VALUES (?, ?, ?, ?)", [h.session_id, p.step, h.ts, json.dumps(h.payload)])
    )


@projects(LossScaleChanged)
def loss_scale_changed(batch: Batch, h: Header, p: LossScaleChanged, msg: Message) -> None:
    batch.ops.append(("UPDATE sessions SET loss_scale = ? WHERE id = ?", [p.new, h.session_id]))


@projects(ResultsDiscarded)
def results_discarded(batch: Batch, h: Header, p: ResultsDiscarded, msg: Message) -> None:
    # a quarantined PNode's results may be in these steps and checkpoints: they are run again
    for key in [k for k in batch.steps if k[0] == h.session_id and k[1] >= p.from_step]:
        del batch.steps[key]
    batch.ops += [
        ("DELETE FROM steps WHERE session_id = ? AND step >= ?", [h.session_id, p.from_step]),
        ("DELETE FROM checkpoints WHERE session_id = ? AND step > ?", [h.session_id, p.from_step]),
        (COUNT_STEPS_COMPLETED, [h.session_id, h.session_id]),
    ]


# -- spot checks -----------------------------------------------------------------


@projects(ChecksCompleted)
def checks_completed(batch: Batch, h: Header, p: ChecksCompleted, msg: Message) -> None:
    for check in p.checks:
        counts = [int(check.outcome == o) for o in ("passed", "failed", "abandoned")]
        batch.ops.append((
            "INSERT INTO checks VALUES (?, ?, ?, ?, ?) ON CONFLICT (session_id, pnode) DO UPDATE SET "
            "passed = checks.passed + excluded.passed, failed = checks.failed + excluded.failed, "
            "abandoned = checks.abandoned + excluded.abandoned",
            [h.session_id, check.pnode, *counts],
        ))


@projects(PNodeQuarantined)
def pnode_quarantined(batch: Batch, h: Header, p: PNodeQuarantined, msg: Message) -> None:
    # recorded on the session's subject and on the PNode's: the first one sets the time
    batch.ops.append((
        "INSERT INTO pnodes (id, quarantined_ts, quarantine_reason) VALUES (?, ?, ?) ON CONFLICT (id) DO UPDATE SET "
        "quarantined_ts = coalesce(pnodes.quarantined_ts, excluded.quarantined_ts), "
        "quarantine_reason = coalesce(pnodes.quarantine_reason, excluded.quarantine_reason)",
        [p.pnode, h.ts, p.reason],
    ))


# -- pnodes -------------------------------------------------------------------


@projects(PNodeJoined)
def pnode_joined(batch: Batch, h: Header, p: PNodeJoined, msg: Message) -> None:
    batch.ops.append(
        (
            "INSERT INTO pnodes (id, host, os_pid, device, memory_bytes, state, joined_ts, throughput) "
            "VALUES (?, ?, ?, ?, ?, 'live', ?, ?) "
            "ON CONFLICT (id) DO UPDATE SET host = excluded.host, os_pid = excluded.os_pid, device = excluded.device, "
            "memory_bytes = excluded.memory_bytes, state = 'live', joined_ts = excluded.joined_ts, left_ts = NULL, "
            "throughput = excluded.throughput",
            [p.pnode, p.host, p.os_pid, p.device, p.memory_bytes, h.ts,
             p.throughput.model_dump_json() if p.throughput else None],
        )
    )


@projects(PNodeLeft, PNodeLost)
def pnode_gone(batch: Batch, h: Header, p: PNodeLeft | PNodeLost, msg: Message) -> None:
    state = "lost" if isinstance(p, PNodeLost) else "left"
    batch.ops.append(
        (
            "INSERT INTO pnodes (id, state, left_ts) VALUES (?, ?, ?) "
            "ON CONFLICT (id) DO UPDATE SET state = excluded.state, left_ts = excluded.left_ts",
            [p.pnode, state, h.ts],
        )
    )


# -- datasets -----------------------------------------------------------------


@projects(DatasetCreated, TokenizerTrained, Tokenized, SplitCreated, DatasetShared)
def dataset(batch: Batch, h: Header, p: DatasetCreated | TokenizerTrained | Tokenized | SplitCreated | DatasetShared,
            msg: Message) -> None:
    """One row per dataset, its details merged from each event: who owns it and whether it is public too."""
    batch.ops.append(
        (
            "INSERT INTO datasets VALUES (?, ?, ?) ON CONFLICT (name) DO UPDATE SET ts = excluded.ts, "
            "detail = json_merge_patch(datasets.detail, excluded.detail)",
            [p.name, h.ts, json.dumps(h.payload)],
        )
    )
