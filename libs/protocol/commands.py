"""Session commands, published on `ca.cmd.<user>.session.<sid>` and recorded in CA_LOG.

The `<user>` token is who sends the command: only that user's credential (or the monitor, for
the dashboard's user it authenticated) may publish there. The envelope's `actor` must say the same.

`Nats-Msg-Id` is the envelope id, so JetStream drops a duplicate within its
duplicate window; the orchestrator also ignores an id it has already handled.
"""

from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import BaseModel, ConfigDict, Field

from .config import SessionConfig
from .envelope import Envelope


class _Command(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CreateSession(_Command):
    """Create a session with this config (it starts unless `start` is false)."""

    type: Literal["CreateSession"] = "CreateSession"
    config: SessionConfig
    start: bool = True


class StartSession(_Command):
    """Start a session created without starting (it queues while its owner runs as many as a user may)."""

    type: Literal["StartSession"] = "StartSession"


class PauseSession(_Command):
    """Pause a running session at its next step boundary; it resumes from there."""

    type: Literal["PauseSession"] = "PauseSession"


class ResumeSession(_Command):
    """Resume a paused session from where it paused."""

    type: Literal["ResumeSession"] = "ResumeSession"
    fuse_heads: bool | None = Field(None, description="from this resume on, fuse per-head attention VNodes or keep them "
                                                      "apart (the checkpoint is mapped); unset keeps the session's setting")


class StopSession(_Command):
    """Stop a session for good (a running one at its next step boundary); its last checkpoint stands."""

    type: Literal["StopSession"] = "StopSession"


class ValidateSession(_Command):
    """Run a validation pass of a running session at its next step boundary."""

    type: Literal["ValidateSession"] = "ValidateSession"


class DeleteSession(_Command):
    """Delete a session: lists and views leave it out, its events stay in the log; a running one stops at
    its next step boundary first."""

    type: Literal["DeleteSession"] = "DeleteSession"


Command = Annotated[
    Union[CreateSession, StartSession, PauseSession, ResumeSession, StopSession, ValidateSession, DeleteSession],
    Field(discriminator="type"),
]

CommandEnvelope = Envelope[Command]
