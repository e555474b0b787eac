"""Who may command a session: its owner, known by the command's subject, never by a message field.

A command arrives on `<prefix>.cmd.<user>.session.<sid>`, where only `<user>`'s credential (or the
monitor, for a dashboard user it authenticated) may publish. The orchestrator believes that
token: the command's `actor` must name the same user, a session is created with that user as its
owner, and only the owner may command it afterwards, or replay it.

`authorize` decides from memory alone: the owner of every session the orchestrator has seen
created (`SessionCreated`, which it subscribes to). A forged command, or one for a session that
was never created or is someone else's, costs no log read to refuse. Only a create for a session
id never created reads the log, once: the id is the user's who sent its first command
(`reads.SessionReads.owner`), so no one takes over an id whose refused create another user can read.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from computeall.protocol.commands import CommandEnvelope, CreateSession
from computeall.protocol.session_state import Rejected

OwnerOf = Callable[[str], str | None]
FirstCommanderOf = Callable[[str], Awaitable[str | None]]


def authorize(user: str, command: CommandEnvelope, owner_of: OwnerOf) -> None:
    """Raise `Rejected` with the reason when `user` may not give `command`; `owner_of`: the owner of a
    session seen created (None for any other id), from memory."""
    if command.actor != user:
        raise Rejected(f"the command says it is from {command.actor!r}, but user {user!r} sent it")
    sid, owner = command.session_id, owner_of(command.session_id)
    if owner is None and not isinstance(command.payload, CreateSession):
        raise Rejected(f"user {user} has no session {sid}; `computeall session list` shows yours")
    if owner is not None and owner != user:
        raise Rejected(f"session {sid} belongs to another user")
    if isinstance(command.payload, CreateSession) and (replay := command.payload.config.replay_of):
        if owner_of(replay.session_id) != user:
            raise Rejected(f"user {user!r} has no session {replay.session_id} to replay")


async def claim_new_id(user: str, sid: str, first_commander_of: FirstCommanderOf) -> None:
    """A create for an id never created: refused when another user commanded that id first."""
    if await first_commander_of(sid) not in (None, user):
        raise Rejected(f"session {sid} belongs to another user")
