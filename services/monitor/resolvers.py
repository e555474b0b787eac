"""Query and object-field resolvers. Every DuckDB read goes through `db.read` (off the loop)."""

from __future__ import annotations

import asyncio
from typing import Any

from ariadne import ObjectType, QueryType, ScalarType
from graphql import GraphQLResolveInfo

from . import downsample, markers, reads, roles, session_commands, time_and_links
from .context import Context
from .named_series import PNODE_BUSY, PNODE_THROUGHPUT, UPDATE_RATIOS, named_series
from .overview import overview

json_scalar = ScalarType("JSON")  # values pass through as JSON-compatible Python objects
number_list_scalar = ScalarType("NumberList")  # a series column, passed through whole
query = QueryType()
session_type = ObjectType("Session")
pnode_type = ObjectType("PNode")
user_type = ObjectType("User")

MAX_LIST = 10_000


def ctx(info: GraphQLResolveInfo) -> Context:
    return info.context


@query.field("me")
async def resolve_me(_: Any, info: GraphQLResolveInfo) -> dict[str, Any]:
    return {"name": ctx(info).user}


@user_type.field("apiKeys")
async def resolve_api_keys(user: dict, info: GraphQLResolveInfo) -> list[dict]:
    return await ctx(info).services.db.read(reads.user_keys, user["name"])


@query.field("sessions")
async def resolve_sessions(_: Any, info: GraphQLResolveInfo, limit: int = 100) -> list[dict]:
    c = ctx(info)
    return await c.services.db.read(reads.sessions, c.user, min(max(limit, 0), MAX_LIST))


@query.field("session")
async def resolve_session(_: Any, info: GraphQLResolveInfo, id: str) -> dict | None:
    c = ctx(info)
    return await c.services.db.read(reads.session, c.user, id)


@query.field("topology")
async def resolve_topology(_: Any, info: GraphQLResolveInfo, session_id: str, replica: int = 0) -> dict | None:
    c = ctx(info)
    if not await c.services.db.read(reads.owns, c.user, session_id):
        return None
    return await c.services.db.read(reads.topology, session_id, c.services.heartbeat_timeout_s, c.user, replica)


@query.field("pnodes")
async def resolve_pnodes(_: Any, info: GraphQLResolveInfo, ids: list[str] | None = None) -> list[dict]:
    c = ctx(info)
    pnodes = await c.services.db.read(reads.pnodes, c.services.heartbeat_timeout_s, c.user)
    return pnodes if ids is None else [p for p in pnodes if p["id"] in set(ids)]


@query.field("monitor")
async def resolve_monitor(_: Any, info: GraphQLResolveInfo) -> dict:
    services = ctx(info).services
    return {**await services.db.read(reads.stats), "subscriptions": services.pubsub.subscribers}


# -- Session fields: the parent row was already scoped to the caller --------------


@session_type.field("steps")
async def resolve_steps(
    s: dict, info: GraphQLResolveInfo, max_points: int = 1000, metric: str = "LOSS", **rng: int | None
) -> dict[str, list]:
    return await ctx(info).services.db.read(
        downsample.steps, s["id"], rng.get("from"), rng.get("to"), max(1, max_points), metric
    )


@session_type.field("pnodeThroughput")
async def resolve_pnode_throughput(s: dict, info: GraphQLResolveInfo, max_points: int = 1000, **rng: int | None) -> list[dict]:
    return await ctx(info).services.db.read(
        named_series, PNODE_THROUGHPUT, s["id"], rng.get("from"), rng.get("to"), max_points
    )


@session_type.field("pnodeBusy")
async def resolve_pnode_busy(s: dict, info: GraphQLResolveInfo, max_points: int = 1000, **rng: int | None) -> list[dict]:
    return await ctx(info).services.db.read(named_series, PNODE_BUSY, s["id"], rng.get("from"), rng.get("to"), max_points)


@session_type.field("updateRatios")
async def resolve_update_ratios(s: dict, info: GraphQLResolveInfo, max_points: int = 1000, **rng: int | None) -> list[dict]:
    return await ctx(info).services.db.read(named_series, UPDATE_RATIOS, s["id"], rng.get("from"), rng.get("to"), max_points)


@session_type.field("overview")
async def resolve_overview(s: dict, info: GraphQLResolveInfo) -> dict | None:
    summary = await asyncio.to_thread(overview, s["config"])  # parses the network: off the event loop
    return summary.model_dump() if summary else None


@session_type.field("markers")
async def resolve_markers(s: dict, info: GraphQLResolveInfo) -> list[dict]:
    return await ctx(info).services.db.read(markers.markers, s["id"])


@session_type.field("commands")
async def resolve_commands(s: dict, info: GraphQLResolveInfo) -> list[str]:
    return session_commands.allowed(s["status"])


@session_type.field("validations")
async def resolve_validations(s: dict, info: GraphQLResolveInfo) -> list[dict]:
    return await ctx(info).services.db.read(reads.validations, s["id"])


@session_type.field("samples")
async def resolve_samples(s: dict, info: GraphQLResolveInfo, limit: int = 20) -> list[dict]:
    return await ctx(info).services.db.read(reads.samples, s["id"], min(max(limit, 0), MAX_LIST))


@session_type.field("checkpoints")
async def resolve_checkpoints(s: dict, info: GraphQLResolveInfo) -> list[dict]:
    return await ctx(info).services.db.read(reads.checkpoints, s["id"])


@session_type.field("checks")
async def resolve_session_checks(s: dict, info: GraphQLResolveInfo) -> list[dict]:
    return await ctx(info).services.db.read(reads.session_checks, s["id"])


@session_type.field("events")
async def resolve_events(
    s: dict, info: GraphQLResolveInfo, after: int = 0, limit: int = 200, types: list[str] | None = None,
    exclude_types: list[str] | None = None,
) -> list[dict]:
    return await ctx(info).services.db.read(
        reads.events, s["id"], after, min(max(limit, 0), MAX_LIST), types, exclude_types
    )


# -- PNode fields -------------------------------------------------------------


@pnode_type.field("memory")
async def resolve_memory(p: dict, info: GraphQLResolveInfo, since: float | None = None) -> list[dict]:
    return await ctx(info).services.db.read(reads.memory, p["id"], since)


@pnode_type.field("requests")
async def resolve_requests(p: dict, info: GraphQLResolveInfo, limit: int = 50) -> list[dict]:
    c = ctx(info)
    return await c.services.db.read(reads.requests, p["id"], c.user, min(max(limit, 0), MAX_LIST))


@pnode_type.field("roles")
async def resolve_roles(p: dict, info: GraphQLResolveInfo) -> list[dict]:
    c = ctx(info)
    placed = await c.services.db.read(roles.current_allocations, c.user)
    return [roles.role(a, p["id"], p.get("joined_at"), p["state"]).model_dump() for a in placed]


@pnode_type.field("timeShare")
async def resolve_time_share(p: dict, info: GraphQLResolveInfo, last_steps: int = time_and_links.RECENT_STEPS) -> dict | None:
    if "time_share" in p and last_steps == time_and_links.RECENT_STEPS:
        return p["time_share"]  # the topology read them for all its PNodes at once
    c = ctx(info)
    shares = await c.services.db.read(time_and_links.time_shares, [p["id"]], c.user, min(max(last_steps, 1), MAX_LIST))
    return shares.get(p["id"])


BINDABLES = [json_scalar, number_list_scalar, query, session_type, pnode_type, user_type]
