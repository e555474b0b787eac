"""What `generate` and `export` read of a session, without its PNodes: network, checkpoint, tokenizer.

Everything comes from the bus: the session's events in CA_LOG (SessionCreated holds the network
YAML and the config, CheckpointCommitted names the objects and their digests), the checkpoint
objects from the JetStream Object Store, and the tokenizer of the session's dataset from the
dataset service's bucket (the bucket named by its DatasetCreated event, the file named by the
manifest published there). Every object is checked against its digest. No torch here.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from dataclasses import dataclass

from nats.js.errors import BucketNotFoundError, NotFoundError, ObjectNotFoundError

from computeall.network import NetworkError, load_network
from computeall.protocol.dataset_api import MANIFEST_FILE, session_dataset
from computeall.protocol.events import CheckpointCommitted, DatasetCreated, EventEnvelope
from computeall.protocol.session_state import SessionState, fold
from computeall.protocol.wire import digest

from .client import Client, connect
from .identity import add_credential_argument, user_credential
from .errors import UserError
from .session_view import session_events


def any_reader(state: SessionState) -> None:
    """Who may read a session's checkpoints: anyone on the bus, until authentication lands.

    The authentication work replaces this with a check that the connected user owns the session
    (`state.owner`), raising `UserError` otherwise.
    """


@dataclass(frozen=True)
class SessionCheckpoint:
    session_id: str
    step: int
    network_yaml: str
    objects: dict[str, bytes]  # VNode id -> its safetensors object, digest checked
    dataset: str
    tokenizer_json: bytes  # the dataset's `tokenizers` JSON, digest checked


def add_checkpoint_args(p: argparse.ArgumentParser) -> None:
    """The arguments that name a session's checkpoint and the bus it is on."""
    p.add_argument("session_id")
    p.add_argument("--step", type=int, default=None, help="the checkpoint after this many steps (default: the newest)")
    p.add_argument("--nats", default=None, help="NATS URL (default: NATS_URL, else the running cluster's)")
    p.add_argument("--data-dir", default=None)
    p.add_argument("--prefix", default=None)
    add_credential_argument(p)


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


async def read_session_checkpoint(
    client: Client, sid: str, step: int | None, authorize: Callable[[SessionState], None] = any_reader
) -> SessionCheckpoint:
    """The checkpoint at `step` (default: the newest committed one) and everything needed to use it."""
    try:
        events = await session_events(client.eventlog, sid)
    except ValueError as exc:  # a session id that is no subject token
        raise UserError(str(exc)) from None
    state = fold(sid, events)
    if state.config is None:
        raise UserError(f"no session {sid} in the log; `computeall session list` shows the sessions")
    authorize(state)
    checkpoint = _choose(state, events, step)
    objects = await _checkpoint_objects(client, checkpoint)
    dataset = _dataset_name(state)
    return SessionCheckpoint(
        session_id=sid,
        step=checkpoint.step,
        network_yaml=state.config.network_yaml,
        objects=objects,
        dataset=dataset,
        tokenizer_json=await _tokenizer(client, dataset),
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


async def _checkpoint_objects(client: Client, checkpoint: CheckpointCommitted) -> dict[str, bytes]:
    try:
        store = await client.js.object_store(checkpoint.bucket)
    except BucketNotFoundError:
        raise UserError(f"the checkpoint bucket {checkpoint.bucket} is gone from this NATS server") from None
    out = {}
    for entry in checkpoint.objects:
        try:
            data = (await store.get(entry.object)).data
        except (ObjectNotFoundError, NotFoundError):
            raise UserError(f"checkpoint object {entry.object} is missing from bucket {checkpoint.bucket}") from None
        if digest(data) != entry.digest:
            raise UserError(f"checkpoint object {entry.object} does not match its digest in the log: it is corrupted")
        out[entry.vnode] = data
    return out


def _dataset_name(state: SessionState) -> str:
    data = state.config.data
    try:
        vocab = load_network(state.config.network_yaml).vocab_size
    except NetworkError as exc:
        raise UserError(f"the network of session {state.id} does not load: {exc}") from None
    return session_dataset(data, vocab)


async def _tokenizer(client: Client, dataset: str) -> bytes:
    created = [
        EventEnvelope.model_validate_json(r.data).payload
        for r in await client.eventlog.read(client.subjects.dataset_evt(dataset, "DatasetCreated"))
    ]
    created = [p for p in created if isinstance(p, DatasetCreated) and p.object_store_bucket]
    if not created:
        raise UserError(f"the session's dataset {dataset} is not in the log, so its tokenizer cannot be found")
    bucket = created[-1].object_store_bucket
    try:
        store = await client.js.object_store(bucket)
        manifest = json.loads((await store.get(f"{dataset}/{MANIFEST_FILE}")).data)
        info = manifest["tokenizer"]
        data = (await store.get(f"{dataset}/{info['file']}")).data
    except (BucketNotFoundError, ObjectNotFoundError, NotFoundError):
        raise UserError(f"the tokenizer of dataset {dataset} is missing from bucket {bucket}") from None
    if digest(data) != info["digest"]:
        raise UserError(f"the tokenizer of dataset {dataset} does not match its digest in the manifest: it is corrupted")
    return data
