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
    type: Literal["CreateSession"] = "CreateSession"
    config: SessionConfig
    start: bool = True


class StartSession(_Command):
    type: Literal["StartSession"] = "StartSession"


class PauseSession(_Command):
    type: Literal["PauseSession"] = "PauseSession"


class ResumeSession(_Command):
    type: Literal["ResumeSession"] = "ResumeSession"
    fuse_heads: bool | None = None  # switch attention-head fusion from here on; None keeps the session's setting


class StopSession(_Command):
    type: Literal["StopSession"] = "StopSession"


class ValidateSession(_Command):
    type: Literal["ValidateSession"] = "ValidateSession"


class DeleteSession(_Command):
    """Hide the session from every list and view (its events stay in the log); a running one stops first."""

    type: Literal["DeleteSession"] = "DeleteSession"


Command = Annotated[
    Union[CreateSession, StartSession, PauseSession, ResumeSession, StopSession, ValidateSession, DeleteSession],
    Field(discriminator="type"),
]

CommandEnvelope = Envelope[Command]
