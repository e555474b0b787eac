"""Spot checks between PNodes: a host sends a kept item's material, a checker recomputes the item.

The material travels PNode to PNode as tensor frames (`CheckPartRoute`), never through the
orchestrator. The checker fetches the item's dataset inputs itself, from the dataset service,
runs the VNode (`computeall.tensorcore.recompute`) and replies with the digests of what it
received and of what it computed. It judges nothing: the orchestrator compares the digests with
what the host and its neighbours committed to in their ledgers.
"""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import Executor, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Awaitable, Callable, Iterator

import torch

from computeall.network.ops import DATA_INPUTS, OPS
from computeall.protocol.pnode_api import PNodeReply, Recompute, SendCheckMaterial
from computeall.protocol.verification import CheckReport, ItemDigests
from computeall.protocol.wire import WireError
from computeall.tensorcore.digest import tensor_digest, tensors_digest
from computeall.tensorcore.recompute import Recomputer
from computeall.tensorcore.vnode_runtime import gradients_by_input, loss_gradient, output_dtype, summed_in_order

from .audit import as_read
from .routing import CheckPartRoute

if TYPE_CHECKING:
    from .stage import SessionStage

SendPart = Callable[[str, torch.Tensor, CheckPartRoute], Awaitable[None]]
MATERIAL_WAIT_S = 120.0  # the host sends at once when asked; longer means it is not coming


@dataclass(frozen=True)
class Part:
    """A piece of a check's material as it arrived, with its `tensor_digest`, taken from the digest the
    wire verified of these very bytes (the checker reports it without hashing them again), and the
    PNode that sent it (from the frame's subject)."""

    tensor: torch.Tensor
    digest: str
    sender: str


Pending = tuple[str, str]  # (check id, the PNode sending its material)


class CheckInbox:
    """Material arriving for the checks this PNode runs, and what recomputes them. Kept per (check,
    sender): a check takes the material of the host the orchestrator named, so no other PNode's can
    stand in for it or spoil it. Bounded per sender: material for at most `max_checks` checks at once,
    and what nobody asked for within `ttl_s` is dropped."""

    def __init__(self, recomputer: Recomputer, max_checks: int = 64, ttl_s: float = 300.0) -> None:
        self.recomputer = recomputer
        self.max_checks = max_checks
        self.ttl_s = ttl_s
        self._parts: dict[Pending, dict[str, Part]] = {}
        self._expected: dict[Pending, int] = {}
        self._started: dict[Pending, float] = {}
        self._complete: dict[Pending, asyncio.Event] = {}

    def receive(self, route: CheckPartRoute, part: Part) -> None:
        self._expire()
        key = (route.check, part.sender)
        if key not in self._parts and sum(sender == part.sender for _, sender in self._parts) >= self.max_checks:
            raise WireError(f"material for {self.max_checks} checks from {part.sender} is pending already; "
                            f"dropped {route.check}")
        parts = self._parts.setdefault(key, {})
        if route.part not in parts and len(parts) >= route.parts:
            raise WireError(f"check {route.check} has {route.parts} parts and {part.sender} sent them all; "
                            f"dropped {route.part}")
        parts[route.part] = part
        self._expected[key] = route.parts
        self._started.setdefault(key, time.monotonic())
        if len(parts) >= route.parts:
            self._event(key).set()

    async def take(self, check_id: str, host: str, timeout_s: float) -> dict[str, Part]:
        """Every part of the check's material from `host`, once it has all arrived."""
        key = (check_id, host)
        try:
            await asyncio.wait_for(self._event(key).wait(), timeout_s)
        except asyncio.TimeoutError:
            got = len(self._parts.get(key, {}))
            raise ValueError(f"material for check {check_id} did not arrive from {host} within {timeout_s:.0f}s "
                             f"({got} of {self._expected.get(key, '?')} parts)") from None
        finally:
            self._complete.pop(key, None)
            self._expected.pop(key, None)
            self._started.pop(key, None)
        return self._parts.pop(key)

    def _event(self, key: Pending) -> asyncio.Event:
        return self._complete.setdefault(key, asyncio.Event())

    def _expire(self) -> None:
        now = time.monotonic()
        for key in [k for k, t in self._started.items() if now - t > self.ttl_s and k not in self._complete]:
            self._parts.pop(key, None)
            self._expected.pop(key, None)
            self._started.pop(key, None)


@contextmanager
def host_threads(threads: int | None) -> Iterator[None]:
    """Compute with the host's thread count (the same count gives the same bits). The switch holds
    for this thread only (OpenMP's and MKL's counts are per thread); torch also keeps the count as the
    default of threads yet to make their first parallel call, which the PNode's compute and wire
    threads have made long before a check."""
    mine = torch.get_num_threads()
    if not threads or threads == mine:
        yield
        return
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(mine)


async def send_material(stage: SessionStage, request: SendCheckMaterial, send: SendPart) -> PNodeReply:
    """The host's side: send what it kept for the check to the checker."""
    material = stage.audit.kept.get(request.check_id) if stage.audit else None
    if material is None:
        raise ValueError(f"no material is kept for check {request.check_id}")
    parts = {
        **{f"param.{name}": t for name, t in material.params.items()},
        **{f"input.{slot}": t for slot, t in material.inputs.items()},
        **{f"grad.{consumer}": t for consumer, t in material.grads.items()},
    }
    for part, tensor in parts.items():
        route = CheckPartRoute(session=request.session_id, check=request.check_id, part=part, parts=len(parts))
        await send(request.to, tensor, route)
    return PNodeReply(ok=True, pnode=stage.pnode)


def check_executor(name: str) -> Executor:
    """Checks recompute on a thread of their own, beside the step's work rather than between its items:
    where a core is spare they cost the steps no time. Not niced, unlike samples: the orchestrator
    settles checks at most two steps behind, so a starved check stalls the session (measured on a
    loaded machine: a niced checker doubled the step time, one at normal priority costs its CPU)."""
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"{name}-checks")


async def run_check(stage: SessionStage, request: Recompute, deadline_s: float, executor: Executor) -> PNodeReply:
    """The checker's side: recompute the item from the host's material and report digests."""
    item = request.item
    if stage.check_inbox is None:
        raise ValueError(f"session {request.session_id} is not verified here (its plan did not ask for a ledger)")
    material = await stage.check_inbox.take(item.check_id, item.pnode, min(deadline_s, MATERIAL_WAIT_S))
    spec = stage.graph.vnodes[item.vnode]
    batch = None
    if any(name in DATA_INPUTS for name in spec.inputs):
        feed = stage.feeds(stage.plan.batches.split, stage.plan.micro_batches)
        batch = await feed.get(item.step, item.micro, prefetch=False)
    inputs = []
    for slot, name in enumerate(spec.inputs):
        if name == "data.tokens":
            inputs.append(batch[:, :-1])
        elif name == "data.targets":
            inputs.append(batch[:, 1:])
        elif f"input.{slot}" in material:
            inputs.append(material[f"input.{slot}"].tensor)
        else:
            raise ValueError(f"the material for check {item.check_id} lacks input {slot} ({name})")
    # what it received, as the producers' and consumers' ledgers have it
    received = {name: material[f"input.{slot}"].digest for slot, name in enumerate(spec.inputs) if name not in DATA_INPUTS}
    params = {k.removeprefix("param."): p.tensor for k, p in material.items() if k.startswith("param.")}
    grads = {k.removeprefix("grad."): p.tensor for k, p in material.items() if k.startswith("grad.")}
    grad_digests = {k.removeprefix("grad."): p.digest for k, p in material.items() if k.startswith("grad.")}
    grad_output = None
    if item.backward:
        if OPS[spec.op].is_loss:
            plan = stage.plan
            tokens = plan.batches.micro_batch_size * plan.batches.context * plan.micro_batches
            grad_output = loss_gradient(request.loss_scale, tokens, stage.runtime.device)
        else:
            missing = [c for c in stage.graph.consumers(item.vnode) if c not in grads]
            if missing:
                raise ValueError(f"the material for check {item.check_id} lacks the gradients of {', '.join(missing)}")
            grad_output = summed_in_order([grads[c] for c in stage.graph.consumers(item.vnode)],
                                          output_dtype(stage.graph, item.vnode))

    def work() -> CheckReport:
        with host_threads(request.threads):
            done = stage.check_inbox.recomputer.run(item.vnode, params, inputs, grad_output)
        output = done.output
        if stage.audit and stage.audit.faults:
            output = stage.audit.faults.apply(output, item.step, item.micro, item.vnode, "check")
        # digests of what the readers get, as the host's ledger has them
        result = ItemDigests(micro=item.micro, vnode=item.vnode, output=tensor_digest(as_read(stage._wire, stage.graph, item.vnode, output)))
        if done.input_grads is not None:
            handed_back = gradients_by_input(spec.inputs, done.input_grads)
            result = result.model_copy(update={
                "input_grads": {name: tensor_digest(as_read(stage._wire, stage.graph, name, g)) for name, g in handed_back.items()},
                "param_grads": tensors_digest(done.param_grads),
            })
        return CheckReport(inputs=received, grads=grad_digests, result=result)

    check = await asyncio.get_running_loop().run_in_executor(executor, work)
    return PNodeReply(ok=True, pnode=stage.pnode, step=item.step, check=check)
