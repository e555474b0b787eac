"""Who may command a session: its owner, known by the command's subject, never by a message field.

A command arrives on `<prefix>.cmd.<user>.session.<sid>`, where only `<user>`'s credential (or the
monitor, for a dashboard user it authenticated) may publish. The orchestrator believes that
token: the command's `actor` must name the same user, a session is created with that user as its
owner, and only the owner may command it afterwards, or replay it. The session's first command
names its owner even before there is a `SessionCreated` (`reads.SessionReads.owner`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from computeall.protocol.commands import CommandEnvelope, CreateSession
from computeall.protocol.session_state import Rejected, SessionState

OwnerOf = Callable[[str], Awaitable[str | None]]


async def authorize(user: str, command: CommandEnvelope, state: SessionState, owner_of: OwnerOf) -> None:
    """Raise `Rejected` with the reason when `user` may not give `command` for this session."""
    if command.actor != user:
        raise Rejected(f"the command says it is from {command.actor!r}, but user {user!r} sent it")
    # the owner: who `SessionCreated` names, else (a refused create) who sent the session's first command
    owner = state.owner or await owner_of(state.id)
    if owner is not None and owner != user:
        raise Rejected(f"session {state.id} belongs to another user")
    if isinstance(command.payload, CreateSession) and (replay := command.payload.config.replay_of):
        if await owner_of(replay.session_id) != user:
            raise Rejected(f"user {user!r} has no session {replay.session_id} to replay")
