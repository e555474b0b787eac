"""Run a session on the real system, then the same network as one plain torch model on the same batches."""

from __future__ import annotations

import asyncio

import torch

from computeall.cli.follow import follow_session, start_session
from computeall.cli.session_view import session_events
from computeall.network import Graph, NetworkSpec
from computeall.protocol.dataset_api import files_dataset_name, user_subject
from computeall.protocol.config import SessionConfig
from computeall.protocol.dataset_api import BatchRequest
from computeall.protocol.dataset_client import fetch_batch
from computeall.protocol.events import Allocated, StepCompleted
from computeall.protocol.wire import Tensor
from computeall.tensorcore.optimizer import VNodeOptimizer
from computeall.tensorcore.reference_model import ReferenceModel
from computeall.tensorcore.wire import tensor_from_wire


async def run_session(client, config: SessionConfig) -> tuple[Allocated, list[StepCompleted]]:
    """Its first allocation and its recorded steps."""
    sid, command_id = await start_session(client, config)
    outcome = await asyncio.wait_for(
        follow_session(client, sid, config.steps, progress=False, command_id=command_id), 180
    )
    assert outcome.ok, outcome.message
    events = [e.payload for _, e in await session_events(client, sid)]
    allocated = next(e for e in events if isinstance(e, Allocated))
    return allocated, [e for e in events if isinstance(e, StepCompleted)]


async def fetch_batches(client, config: SessionConfig, spec: NetworkSpec) -> dict:
    """The batches the PNodes trained on, asked of the same dataset service by the session's owner
    (the client's user): (step, micro) -> tokens."""
    dataset = files_dataset_name(config.data, spec.vocab_size, client.user)
    out = {}
    for step in range(config.steps):
        for micro in range(config.micro_batches):
            request = BatchRequest(dataset=dataset, split="train", seed=config.seed, step=step, micro=micro,
                                   micro_batches=config.micro_batches, batch=config.micro_batch_size,
                                   context=spec.context)
            dtype, shape, data = await fetch_batch(client.nc, user_subject(client.subjects, client.user, "batch"), request,
                                                   timeout=30)
            out[(step, micro)] = tensor_from_wire(Tensor("b", dtype, shape, data, {})).long()
    return out


def reference_losses(spec: NetworkSpec, config: SessionConfig, batches: dict) -> list[float]:
    """The single-process plain torch loop: same init, same batches, ordinary autograd, torch's own
    global gradient clipping, the same weight-decay groups."""
    model = ReferenceModel(Graph(spec), config.seed)
    optimizer = VNodeOptimizer(model.named_vnode_parameters(), config.optimizer, model.decay_groups())
    step_tokens = config.batch_size * spec.context
    losses = []
    for step in range(config.steps):
        total = 0.0
        for micro in range(config.micro_batches):
            tokens = batches[(step, micro)]
            loss_sum = model(tokens[:, :-1], tokens[:, 1:])
            (loss_sum / step_tokens).backward()
            total += loss_sum.item()
        if config.grad_clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
        optimizer.step(config.lr.at(step, config.steps))
        model.zero_grad(set_to_none=True)
        losses.append(total / step_tokens)
    return losses
