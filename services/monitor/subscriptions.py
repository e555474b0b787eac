"""Subscriptions (graphql-transport-ws): fed by the projector's in-process notices."""

from __future__ import annotations

import asyncio
from typing import Any, AsyncIterator

from ariadne import SubscriptionType
from graphql import GraphQLError, GraphQLResolveInfo

from . import reads
from .resolvers import ctx

subscription = SubscriptionType()

PNODES_MIN_INTERVAL_S = 1.0
# how often a subscription to a session the monitor has not projected yet looks for it again
SESSION_LOOKUP_S = (0.25, 2.0)


async def _owned(info: GraphQLResolveInfo, session_id: str) -> None:
    """Return once the session is the user's; refuse it if it is someone else's. A session page
    can open before the monitor has projected the session (the link `computeall train` prints, or
    a page opened while the monitor catches up), so a session not seen yet is waited for: the
    caller has already subscribed, and its notices queue up meanwhile."""
    c = ctx(info)
    wait = SESSION_LOOKUP_S[0]
    while (owner := await c.services.db.read(reads.owner, session_id)) is None:
        await asyncio.sleep(wait)
        wait = min(2 * wait, SESSION_LOOKUP_S[1])
    if owner != c.user:
        raise GraphQLError(f"session {session_id} not found")


async def _session_feed(info: GraphQLResolveInfo, session_id: str, topic: str) -> AsyncIterator[dict]:
    with ctx(info).services.pubsub.subscribe(f"{topic}:{session_id}") as queue:
        await _owned(info, session_id)
        while True:
            yield await queue.get()


@subscription.source("steps")
def steps_source(_: Any, info: GraphQLResolveInfo, session_id: str) -> AsyncIterator[dict]:
    return _session_feed(info, session_id, "steps")


@subscription.source("sessionEvents")
def events_source(_: Any, info: GraphQLResolveInfo, session_id: str) -> AsyncIterator[dict]:
    return _session_feed(info, session_id, "events")


@subscription.source("pnodes")
async def pnodes_source(_: Any, info: GraphQLResolveInfo) -> AsyncIterator[list[dict]]:
    services, user = ctx(info).services, ctx(info).user
    with services.pubsub.subscribe("pnodes") as queue:
        yield await services.db.read(reads.pnodes, services.heartbeat_timeout_s, user)
        while True:
            await queue.get()
            # coalesce a burst of telemetry into one snapshot a second
            await asyncio.sleep(PNODES_MIN_INTERVAL_S)
            while not queue.empty():
                queue.get_nowait()
            yield await services.db.read(reads.pnodes, services.heartbeat_timeout_s, user)


def _passthrough(item: Any, *_: Any, **__: Any) -> Any:
    return item


for _field in ("steps", "sessionEvents", "pnodes"):
    subscription.set_field(_field, _passthrough)
