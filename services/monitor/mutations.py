"""Mutations: API keys of the calling user, and session commands published as that user (one per verb
the session aggregate declares: `session_commands.py`)."""

from __future__ import annotations

import uuid
from typing import Any

from ariadne import MutationType
from graphql import GraphQLError, GraphQLResolveInfo
from pydantic import ValidationError

from computeall.protocol.commands import CommandEnvelope, CreateSession
from computeall.protocol.config import SessionConfig
from computeall.protocol.session_commands import CommandSpec, session_verbs

from . import reads
from .resolvers import ctx
from .session_commands import mutation_name

mutation = MutationType()


@mutation.field("createApiKey")
async def resolve_create_api_key(_: Any, info: GraphQLResolveInfo, label: str = "") -> dict:
    c = ctx(info)
    key_id, key = await c.services.auth.create_key(c.user, label)
    return {"id": key_id, "api_key": key}


@mutation.field("revokeApiKey")
async def resolve_revoke_api_key(_: Any, info: GraphQLResolveInfo, id: str) -> bool:
    c = ctx(info)
    if not await c.services.auth.revoke_key(c.user, id):
        raise GraphQLError(f"API key {id} not found (or already revoked)")
    return True


async def _publish(info: GraphQLResolveInfo, sid: str, payload: Any) -> dict:
    c = ctx(info)
    command = CommandEnvelope(actor=c.user, session_id=sid, payload=payload)
    await c.services.eventlog.publish_command(command)
    return {"session_id": sid, "command_id": command.id}


@mutation.field("createSession")
async def resolve_create_session(_: Any, info: GraphQLResolveInfo, config: Any, start: bool = True) -> dict:
    try:
        parsed = SessionConfig.model_validate(config)
    except ValidationError as exc:
        raise GraphQLError(f"invalid session config: {exc}") from None
    return await _publish(info, uuid.uuid4().hex[:16], CreateSession(config=parsed, start=start))


def _session_command(spec: CommandSpec) -> None:
    """`<verb>Session(id, ...)`: the command's fields arrive as arguments (snake_case: `convert_names_case`)."""
    async def resolve(_: Any, info: GraphQLResolveInfo, id: str, **fields: Any) -> dict:
        c = ctx(info)
        # someone else's session reads as a missing one: its existence is not disclosed
        if not await c.services.db.read(reads.owns, c.user, id):
            raise GraphQLError(f"session {id} not found")
        return await _publish(info, id, spec.model(**fields))

    mutation.set_field(mutation_name(spec.verb), resolve)


for _spec in session_verbs().values():
    _session_command(_spec)
