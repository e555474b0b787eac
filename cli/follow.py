"""Follow a session's events: a progress bar with the loss, metrics as JSON lines, the outcome."""

from __future__ import annotations

import json
import sys
from contextlib import aclosing
from pathlib import Path

from tqdm import tqdm

from .client import Client
from .errors import UserError
from .tensorboard_log import TensorBoardRun

from computeall.protocol.commands import CommandEnvelope, CreateSession
from computeall.protocol.config import SessionConfig
from computeall.protocol.envelope import new_id
from computeall.protocol.eventlog import CommandTooLarge
from computeall.protocol.events import (
    CommandRejected, SamplesGenerated, SessionCompleted, SessionFailed, SessionQueued, StepCompleted,
)


def new_session_id() -> str:
    return new_id()[:12]


async def start_session(
    client: Client, config: SessionConfig, start: bool = True, sid: str | None = None
) -> tuple[str, str]:
    """Publish `CreateSession` for session `sid` (default: a new id), as the client's user; (session id, command id)."""
    sid = sid or new_session_id()
    command = CommandEnvelope(actor=client.user, session_id=sid, payload=CreateSession(config=config, start=start))
    try:
        await client.publish_command(command)
    except CommandTooLarge as exc:
        raise UserError(str(exc)) from None
    return sid, command.id


class Outcome:
    def __init__(self, ok: bool, message: str) -> None:
        self.ok = ok
        self.message = message


async def follow_session(
    client: Client,
    session_id: str,
    total_steps: int,
    metrics_out: Path | None = None,
    progress: bool = True,
    command_id: str | None = None,
    tensorboard: Path | None = None,
) -> Outcome:
    """Block until the session completes or fails, or the command `command_id` is rejected. Its steps go
    to `metrics_out` as JSON lines and to `tensorboard` as a TensorBoard run, as they are recorded."""
    out = open(metrics_out, "w") if metrics_out else None
    board = TensorBoardRun(tensorboard, session_id) if tensorboard else None
    bar = tqdm(total=total_steps, desc=f"session {session_id}", unit="step", disable=not progress, file=sys.stderr)
    try:
        events = client.follow(session_id)
        async with aclosing(events):
            async for _, event in events:
                if board:
                    board.record(event)
                p = event.payload
                if isinstance(p, StepCompleted):
                    if out:  # when it was recorded (ts), then every field of the event: loss, timings, ...
                        out.write(json.dumps({"ts": event.ts, **p.model_dump(exclude={"type"})}) + "\n")
                        out.flush()
                    bar.n = p.step + 1
                    bar.set_postfix(loss=f"{p.loss:.4f}", refresh=False)
                    bar.refresh()
                elif isinstance(p, SessionQueued):  # it starts once one of the user's sessions ends or pauses
                    tqdm.write(f"session {session_id} is queued: {p.reason}", file=sys.stderr)
                elif isinstance(p, SamplesGenerated):
                    for sample in p.samples:  # above the progress bar, which stays at the bottom
                        tqdm.write(f"[step {p.step}] {sample.prompt}{sample.text}", file=sys.stderr)
                elif isinstance(p, SessionCompleted):
                    return Outcome(True, f"session {session_id} completed {p.steps} steps, final loss {p.final_loss:.4f}")
                elif isinstance(p, SessionFailed):
                    return Outcome(False, f"session {session_id} failed: {p.reason}")
                elif isinstance(p, CommandRejected) and p.command_id == command_id:
                    return Outcome(False, f"{p.command_type} was rejected: {p.reason}")
    finally:
        bar.close()
        if out:
            out.close()
        if board:
            board.close()
    return Outcome(False, "the event stream ended")
