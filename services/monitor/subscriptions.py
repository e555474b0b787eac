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


async def _owned(info: GraphQLResolveInfo, session_id: str) -> None:
    c = ctx(info)
    if not await c.services.db.read(reads.owns, c.user, session_id):
        raise GraphQLError(f"session {session_id} not found")


@subscription.source("steps")
async def steps_source(_: Any, info: GraphQLResolveInfo, session_id: str) -> AsyncIterator[dict]:
    await _owned(info, session_id)
    with ctx(info).services.pubsub.subscribe(f"steps:{session_id}") as queue:
        while True:
            yield await queue.get()


@subscription.source("sessionEvents")
async def events_source(_: Any, info: GraphQLResolveInfo, session_id: str) -> AsyncIterator[dict]:
    await _owned(info, session_id)
    with ctx(info).services.pubsub.subscribe(f"events:{session_id}") as queue:
        while True:
            yield await queue.get()


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
