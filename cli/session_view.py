"""What `session list`, `session show` and `replay` read: a session's events, folded and listed."""

from __future__ import annotations

from typing import Any

from computeall.protocol.events import (
    CheckpointCommitted,
    ChecksCompleted,
    CommandRejected,
    EventEnvelope,
    InitializedFrom,
    PNodeLost,
    PNodeQuarantined,
    Reallocated,
    ResultsDiscarded,
    RolledBack,
    SamplesGenerated,
    StepCompleted,
    ValidationCompleted,
    standing,
)
from computeall.protocol.session_state import SessionState, fold
from computeall.protocol.session_status import SessionStatus

from .client import Client
from .errors import UserError


async def session_events(client: Client, sid: str) -> list[tuple[int, EventEnvelope]]:
    """A session of the client's user, as recorded (the orchestrator refuses anyone else's)."""
    return await client.session_events(sid)


def find_session(sid: str, events: list[tuple[int, EventEnvelope]]) -> SessionState:
    """The session folded from its events, or the user's error when it does not exist (yet)."""
    state = fold(sid, events)
    if state.status == SessionStatus.NEW:
        raise UserError(f"no session {sid}")
    return state


def summary(state: SessionState) -> dict[str, Any]:
    replay = state.config.replay_of if state.config else None
    return {
        "session_id": state.id,
        "status": state.status,
        "owner": state.owner,
        "step": state.next_step,
        "steps": (replay.to_step if replay else state.config.steps) if state.config else None,
        "last_loss": state.last_loss,
        "verifies": replay.session_id if replay else None,  # a `replay verify` run re-executes that session
        "reason": state.queue_reason or state.pause_reason,  # why it waits: queued, or paused by the orchestrator
    }


def loss_text(loss: float | None) -> str:
    return f"{loss:.4f}" if loss is not None else "-"


def kind_text(row: dict[str, Any]) -> str:
    """What a session is, for people: a training run, or the verification of another one."""
    return f"verify of {row['verifies']}" if row["verifies"] else "training"


def session_table(rows: list[dict[str, Any]]) -> str:
    """`session list`: a header and a row per session (`summary`), or how to make the first one."""
    if not rows:
        return "no sessions yet: `computeall session create --network NETWORK.yaml` makes one (or `computeall up --train NETWORK.yaml`)"
    width = max(len(r["session_id"]) for r in rows)
    lines = [f"{'SESSION':<{width}}  {'STATUS':<10} {'STEP':>11}  {'LOSS':>7}  {'OWNER':<12} KIND"]
    for r in rows:
        step = f"{r['step']}/{r['steps']}"
        lines.append(f"{r['session_id']:<{width}}  {r['status']:<10} {step:>11}  {loss_text(r['last_loss']):>7}  "
                     f"{r['owner'] or '-':<12} {kind_text(r)}" + (f"  ({r['reason']})" if r.get("reason") else ""))
    return "\n".join(lines)


def report(state: SessionState, events: list[tuple[int, EventEnvelope]]) -> dict[str, Any]:
    """Everything `session show` prints: status, config, metrics, validations, checkpoints, rejections."""
    payloads = standing([e.payload for _, e in events])  # a step re-run after a quarantine, once
    return {
        **summary(state),
        "config": state.config.model_dump(exclude={"network_yaml"}) if state.config else None,
        "failure": state.failure,
        "metrics": [
            {"step": p.step, "loss": p.loss, "tokens": p.tokens, "step_time_s": p.step_time_s, "lr": p.lr}
            for p in payloads if isinstance(p, StepCompleted)
        ],
        "validations": [p.model_dump(exclude={"type"}) for p in payloads if isinstance(p, ValidationCompleted)],
        "checkpoints": [
            {"step": c.step, "objects": len(c.objects), "bytes": sum(o.bytes for o in c.objects), "seconds": c.seconds,
             "pruned": c.step not in {k.step for k in state.checkpoints}}
            for c in payloads if isinstance(c, CheckpointCommitted)
        ],
        "initialized_from": next((p.source for p in payloads if isinstance(p, InitializedFrom)), None),
        "samples": [p.model_dump(include={"step", "samples"}) for p in payloads if isinstance(p, SamplesGenerated)],
        "rejected_commands": [p.model_dump(exclude={"type"}) for p in payloads if isinstance(p, CommandRejected)],
        "failovers": failovers(payloads),
        "rebalances": [
            {"reason": p.reason, "moves": p.moves, "pnodes": p.pnodes}
            for p in payloads if isinstance(p, Reallocated) and not p.reason.startswith(("lost ", "quarantined "))
        ],
        "checks": check_counts(payloads),
        "quarantined": quarantines(payloads),
    }


def quarantines(payloads: list) -> list[dict[str, Any]]:
    """Each PNode caught computing wrong results, and the step the session went back to."""
    out: list[dict[str, Any]] = []
    for p in payloads:
        if isinstance(p, PNodeQuarantined):
            out.append(p.model_dump(exclude={"type"}))
        elif isinstance(p, ResultsDiscarded):
            for entry in out:
                entry.setdefault("back_to_step", p.from_step)
    return out


def check_counts(payloads: list) -> dict[str, dict[str, int]]:
    """Spot checks of each PNode's results: passed, failed, abandoned."""
    counts: dict[str, dict[str, int]] = {}
    for p in payloads:
        if isinstance(p, ChecksCompleted):
            for c in p.checks:
                row = counts.setdefault(c.pnode, {"passed": 0, "failed": 0, "abandoned": 0})
                row[c.outcome] += 1
    return counts


def failovers(payloads: list) -> list[dict[str, Any]]:
    """Each failure and its recovery: the lost PNodes, where their VNodes went, the steps re-run."""
    out: list[dict[str, Any]] = []
    current: dict[str, Any] | None = None
    for p in payloads:
        if isinstance(p, PNodeLost):
            if current is None or "rolled_back_to" in current:
                current = {"lost": [], "at_step": p.step, "moves": {}}
                out.append(current)
            current["lost"].append(p.pnode)
        elif isinstance(p, Reallocated) and current is not None and p.reason.startswith("lost "):
            current["moves"].update(p.moves)
            current["pnodes_after"] = p.pnodes
        elif isinstance(p, RolledBack) and current is not None:
            current.update(rolled_back_to=p.to_step, steps_rerun=max(0, p.from_step - p.to_step))
        elif isinstance(p, PNodeQuarantined):
            current = None  # what follows is the quarantine's recovery (listed under "quarantined"), not a failover's
    return out
