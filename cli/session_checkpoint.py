"""What `generate` and `export` read of a session, without its PNodes: network, checkpoint, tokenizer.

Everything comes from the bus, through the orchestrator's reads of the user's own sessions
(`computeall.protocol.session_reads`; another user's session is refused): the session's events
(SessionCreated holds the network YAML and the config, CheckpointCommitted names the objects and
their digests), the checkpoint objects, and the tokenizer of the session's dataset. Every object is
checked against its digest in the log here too. No torch here.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from computeall.protocol.events import CheckpointCommitted, EventEnvelope
from computeall.protocol.session_reads import ReadObject
from computeall.protocol.session_state import SessionState, fold
from computeall.protocol.wire import digest

from .cluster_file import add_data_dir_argument
from .client import Client, connect
from .errors import UserError
from .identity import add_user_arguments, user_credential
from .session_view import session_events


@dataclass(frozen=True)
class SessionCheckpoint:
    session_id: str
    step: int
    network_yaml: str
    objects: dict[str, bytes]  # VNode id -> its safetensors object, digest checked
    tokenizer_json: bytes  # the dataset's `tokenizers` JSON, digest checked against its manifest
def add_checkpoint_args(p: argparse.ArgumentParser) -> None:
    """The arguments that name a session's checkpoint and the bus it is on."""
    p.add_argument("session_id")
    p.add_argument("--step", type=int, default=None, help="the checkpoint after this many steps (default: the newest)")
    p.add_argument("--nats", default=None, help="NATS URL (default: NATS_URL, else the running cluster's)")
    add_data_dir_argument(p)
    p.add_argument("--prefix", default=None)
    add_user_arguments(p)


async def checkpoint_from_args(args: argparse.Namespace) -> SessionCheckpoint:
    async with connect(user_credential(args), args.prefix) as client:
        return await read_session_checkpoint(client, args.session_id, args.step)


def trained_model(checkpoint: SessionCheckpoint):
    """The checkpoint as a `computeall.tensorcore.trained_model.TrainedModel`; torch is imported here, not before."""
    from computeall.tensorcore.trained_model import ModelLoadError, TrainedModel

    try:
        return TrainedModel.from_checkpoint(checkpoint.network_yaml, checkpoint.objects)
    except ModelLoadError as exc:
        raise UserError(f"session {checkpoint.session_id}, step {checkpoint.step}: {exc}") from None


async def read_session_checkpoint(client: Client, sid: str, step: int | None) -> SessionCheckpoint:
    """The checkpoint at `step` (default: the newest committed one) and everything needed to use it."""
    try:
        events = await session_events(client, sid)
    except ValueError as exc:  # a session id that is no subject token
        raise UserError(str(exc)) from None
    state = fold(sid, events)
    if state.config is None:
        raise UserError(f"no session {sid}; `computeall session list` shows yours")
    checkpoint = _choose(state, events, step)
    return SessionCheckpoint(
        session_id=sid,
        step=checkpoint.step,
        network_yaml=state.config.network_yaml,
        objects=await _checkpoint_objects(client, sid, checkpoint),
        tokenizer_json=await client.read_object(ReadObject(session_id=sid, object="tokenizer.json", kind="tokenizer")),
    )


def _choose(state: SessionState, events: list[tuple[int, EventEnvelope]], step: int | None) -> CheckpointCommitted:
    kept = {c.step: c for c in state.checkpoints}
    if not kept:
        raise UserError(
            f"session {state.id} has no checkpoint yet: one is written on pause, stop and completion, "
            f"and every --checkpoint-every steps; wait for one or pause the session"
        )
    if step is None:
        return state.last_checkpoint
    if step in kept:
        return kept[step]
    ever = {e.payload.step for _, e in events if isinstance(e.payload, CheckpointCommitted)}
    listed = ", ".join(map(str, sorted(kept)))
    if step in ever:
        raise UserError(f"the checkpoint at step {step} of session {state.id} was pruned (keep_checkpoints); kept steps: {listed}")
    raise UserError(f"session {state.id} has no checkpoint at step {step}; kept steps: {listed}")


async def _checkpoint_objects(client: Client, sid: str, checkpoint: CheckpointCommitted) -> dict[str, bytes]:
    out = {}
    for entry in checkpoint.model_objects:  # replica 0's (diloco writes one set per replica)
        data = await client.read_object(ReadObject(session_id=sid, object=entry.object))
        if digest(data) != entry.digest:
            raise UserError(f"checkpoint object {entry.object} does not match its digest in the log: it is corrupted")
        out[entry.vnode] = data
    return out
