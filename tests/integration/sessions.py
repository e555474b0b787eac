"""Helpers for session tests: commands, waiting on events, reading losses."""

from __future__ import annotations

import asyncio
from contextlib import aclosing

from computeall.cli.client import Client
from computeall.cli.follow import follow_session, start_session
from computeall.cli.session_view import session_events
from computeall.protocol.commands import CommandEnvelope
from computeall.protocol.config import DataConfig, PipelineConfig, SessionConfig
from computeall.protocol.events import CheckpointCommitted, CommandRejected, StepCompleted
from computeall.protocol.session_state import SessionState, fold

from .cluster import stdlib_corpus
from .test_training_run import NETWORK
from .waiting import wait_until_async


# Placement never changes the math, and these tests check it: they spread a small network over every
# PNode they start (`stages: N` takes N stages while N PNodes are live, fewer while fewer are), where
# `stages: auto` would train it on fewer and keep the others as standbys
EVERY_PNODE = 256


def spread(pipeline: PipelineConfig | dict | None = None) -> PipelineConfig:
    """`pipeline` with a stage on every PNode, unless it names its stages."""
    pipeline = PipelineConfig.model_validate(pipeline or {})
    return pipeline if "stages" in pipeline.model_fields_set else pipeline.model_copy(update={"stages": EVERY_PNODE})


def config(steps: int = 24, **overrides) -> SessionConfig:
    settings = {"network_yaml": NETWORK.read_text(), "seed": 3, "checkpoint_every": 5, "keep_checkpoints": 10,
                "min_pnodes": 2, **overrides}
    settings["pipeline"] = spread(settings.get("pipeline"))
    return SessionConfig(data=DataConfig(files=stdlib_corpus()), steps=steps, **settings)


async def command(client: Client, sid: str, payload) -> CommandEnvelope:
    envelope = CommandEnvelope(actor=client.user, session_id=sid, payload=payload)
    await client.publish_command(envelope)
    return envelope


async def state(client: Client, sid: str) -> SessionState:
    return fold(sid, await session_events(client, sid))


async def wait_for(client: Client, sid: str, predicate, timeout: float = 120.0) -> SessionState:
    seen: list[SessionState] = []

    async def reached() -> SessionState | None:
        seen.append(await state(client, sid))
        return seen[-1] if predicate(seen[-1]) else None

    try:
        return await wait_until_async(reached, timeout, f"session {sid} reaching the condition", interval=0.3)
    except AssertionError as exc:
        last = seen[-1]
        why = f" ({last.failure})" if last.failure else ""
        raise AssertionError(f"{exc}: {last.status} step {last.next_step}{why}") from None


async def rejection(client: Client, sid: str, command_id: str, timeout: float = 60.0) -> str:
    """The reason the orchestrator gave for refusing command `command_id` of session `sid`."""
    async def watch() -> str:
        events = client.follow(sid)
        async with aclosing(events):
            async for _, event in events:
                if isinstance(event.payload, CommandRejected) and event.payload.command_id == command_id:
                    return event.payload.reason
        raise AssertionError(f"the events of session {sid} ended without refusing {command_id}")

    return await asyncio.wait_for(watch(), timeout)


async def run_to_end(client: Client, cfg: SessionConfig, timeout: float = 240.0) -> str:
    sid, command_id = await start_session(client, cfg)
    outcome = await asyncio.wait_for(follow_session(client, sid, cfg.steps, progress=False, command_id=command_id), timeout)
    assert outcome.ok, outcome.message
    return sid


async def losses(client: Client, sid: str) -> list[tuple[int, float]]:
    """Every recorded StepCompleted, in log order (a step recorded twice would show twice)."""
    return [(e.payload.step, e.payload.loss) for _, e in await session_events(client, sid)
            if isinstance(e.payload, StepCompleted)]


def final_digests(events) -> dict[str, str]:
    """The digest of every VNode's final state (weights and optimizer), from the last checkpoint."""
    last = [e.payload for _, e in events if isinstance(e.payload, CheckpointCommitted)][-1]
    return {o.vnode: o.digest for o in last.objects}

