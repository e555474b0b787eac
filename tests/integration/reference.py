"""Run a session on the real system, then the same network in one process on the same batches: as torch's
own modules and optimizer (`plain_torch_run`, the outside reference), or as our VNode modules in one
module (`reference_losses`, which checks rewrites of our own graph such as head fusion)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

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
from computeall.tensorcore.plain_gpt import GPT, GPTShape, loss_fn, vnode_names
from computeall.tensorcore.reference_model import ReferenceModel
from computeall.tensorcore.tensor_frames import tensor_from_wire


@dataclass
class SessionRun:
    session_id: str
    allocated: Allocated  # the first allocation
    steps: list[StepCompleted]


async def run_session(client, config: SessionConfig) -> SessionRun:
    """Run the session to its end: its first allocation and its recorded steps."""
    sid, command_id = await start_session(client, config)
    outcome = await asyncio.wait_for(
        follow_session(client, sid, config.steps, progress=False, command_id=command_id), 180
    )
    assert outcome.ok, outcome.message
    events = [e.payload for _, e in await session_events(client, sid)]
    allocated = next(e for e in events if isinstance(e, Allocated))
    return SessionRun(sid, allocated, [e for e in events if isinstance(e, StepCompleted)])


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
    """Our VNode modules as one module in one process (`ReferenceModel`): same init, same batches,
    ordinary autograd, torch's own global gradient clipping, our optimizer with its decay groups."""
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


@dataclass
class PlainRun:
    losses: list[float]
    weights: dict[str, torch.Tensor]  # the final parameters, named `<vnode>.<param>`
    near_eps: dict[str, torch.Tensor]  # per parameter: where its gradient once came within ADAM_REACH of zero


# A gradient below this (100 x AdamW's eps) makes the update lr * g / (|g| + eps) hang on the last bits
# of g: on the first step (v = g^2) a difference of 1e-10 in such a g moves the weight by lr * 1e-2.
ADAM_REACH = 1e-6


def plain_torch_run(spec: NetworkSpec, config: SessionConfig, batches: dict, initial: dict[str, torch.Tensor]) -> PlainRun:
    """The network as torch's own modules (`plain_gpt`) trained the way a torch user trains it: the
    session's initial weights loaded, the same batches, autograd summing the micro-batches, torch's
    `clip_grad_norm_` and `AdamW(fused=True)` with nanoGPT's decay groups, the session's lr schedule."""
    names = vnode_names(spec)
    model = GPT(GPTShape.from_spec(spec))
    model.load_vnode_weights(initial, names)
    opt = config.optimizer
    optimizer = torch.optim.AdamW(model.param_groups(opt.weight_decay), lr=0.0, betas=opt.betas, eps=opt.eps, fused=True)
    step_tokens = config.batch_size * spec.context
    near_eps = {name: torch.zeros_like(p, dtype=torch.bool) for name, p in model.named_parameters()}
    losses = []
    for step in range(config.steps):
        total = 0.0
        for micro in range(config.micro_batches):
            tokens = batches[(step, micro)]
            loss_sum = loss_fn(model(tokens[:, :-1]), tokens[:, 1:], reduction="sum")
            (loss_sum / step_tokens).backward()
            total += loss_sum.item()
        if config.grad_clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
        for name, p in model.named_parameters():
            near_eps[name] |= p.grad.abs() < ADAM_REACH
        for group in optimizer.param_groups:
            group["lr"] = config.lr.at(step, config.steps)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(total / step_tokens)
    return PlainRun(losses, model.vnode_weights(names), {names[n]: m for n, m in near_eps.items()})
