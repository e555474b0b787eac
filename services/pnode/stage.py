"""One session's part of the network on this PNode: data-driven forward and backward of a step.

Work items are (micro, VNode) pairs. A forward item runs as soon as its inputs are
here (from a local VNode, another PNode, or the dataset). Backward items run in one
fixed order: micro-batches in order, VNodes in reverse topological order. That order
never waits on anything a later item produces, so it cannot deadlock, and gradients
accumulate in the same order on every placement: 1 PNode or 5 compute the same bits.

A pass is a training step (`phase` "train": forward and backward) or a validation
(`phase` "val": forward only, on the validation split). Tensors between PNodes carry
the phase and step, so the two never mix.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from concurrent.futures import Executor
from dataclasses import dataclass, field
from functools import partial
from typing import Awaitable, Callable

import torch

from computeall.network import Graph, NetworkSpec
from computeall.network.ops import DATA_INPUTS, OPS
from computeall.protocol.pnode_api import ApplyStep, LoadPlan, PNodeReply, RunStep, RunValidation
from computeall.tensorcore.optimizer import VNodeOptimizer
from computeall.tensorcore.update_norms import measured_update
from computeall.tensorcore.vnode_runtime import VNodeRuntime, gradients_by_input, loss_gradient, summed_in_order

from .batches import BatchFeed
from .routing import ActivationKey, GradientKey, PassId, TensorRoute

log = logging.getLogger("computeall.pnode.stage")

# (pnode to send to, tensor, its route) -> sent
Send = Callable[[str, torch.Tensor, TensorRoute], Awaitable[None]]


class StepAborted(RuntimeError):
    pass


@dataclass
class _Pass:
    phase: str  # "train" or "val"
    step: int
    micro_batches: int
    feed: BatchFeed
    backward: bool
    batches: dict[int, torch.Tensor] = field(default_factory=dict)
    outputs: dict[tuple[int, str], torch.Tensor] = field(default_factory=dict)
    grads: dict[tuple[int, str], dict[str, torch.Tensor]] = field(default_factory=lambda: defaultdict(dict))
    done_forward: set[tuple[int, str]] = field(default_factory=set)


class SessionStage:
    def __init__(
        self,
        plan: LoadPlan,
        pnode: str,
        device: torch.device,
        executor: Executor,
        feeds: Callable[[str, int], BatchFeed],
        send: Send,
    ):
        self.plan = plan
        self.pnode = pnode
        self.executor = executor
        self.send = send
        self.graph = Graph(NetworkSpec.model_validate(plan.network))
        self.local = [v for v in self.graph.order if plan.assignment[v] == pnode]
        self.runtime = VNodeRuntime(self.graph, self.local, plan.seed, device)
        self.optimizer = VNodeOptimizer(self.runtime.parameters(), plan.optimizer, self.runtime.decay_groups())
        self.train_feed = feeds(plan.batches.split, plan.micro_batches)
        self.feeds = feeds
        self.inbox: dict[ActivationKey | GradientKey, torch.Tensor] = {}
        self.arrived = asyncio.Event()
        self.current = PassId("train", -1)
        self.loss_scale = 1.0
        self._consumers = {v: self.graph.consumers(v) for v in self.local}
        self.reads_data = any(i in DATA_INPUTS for v in self.local for i in self.graph.vnodes[v].inputs)
        self.has_loss = any(OPS[self.graph.vnodes[v].op].is_loss for v in self.local)

    def abort(self) -> None:
        """Make a pass in flight give up at once (its session was reloaded or unloaded)."""
        self.current = PassId("aborted", -1)
        self.arrived.set()
        self.train_feed.forget()

    def rolled_back(self) -> None:
        """The state went back to a checkpoint: the batches prefetched for what were the next steps
        are not what comes next, and would otherwise stay held until those steps come round again."""
        self.train_feed.forget()

    # -- tensors from other PNodes --------------------------------------------
    def receive(self, route: TensorRoute, tensor: torch.Tensor) -> None:
        if route.phase == self.current.phase and route.step < self.current.step:
            return  # from an aborted or finished pass
        self.inbox[route.inbox_key] = tensor
        self.arrived.set()

    # -- passes ----------------------------------------------------------------
    async def run_step(self, request: RunStep, deadline_s: float) -> PNodeReply:
        self.loss_scale = request.loss_scale
        self.runtime.zero_grad()
        p = _Pass("train", request.step, self.plan.micro_batches, self.train_feed, backward=True)
        return await self._run(p, deadline_s)

    async def run_validation(self, request: RunValidation, deadline_s: float) -> PNodeReply:
        feed = self.feeds(self.plan.batches.validation_split, request.batches)
        p = _Pass("val", request.step, request.batches, feed, backward=False)
        return await self._run(p, deadline_s)

    async def apply(self, request: ApplyStep) -> PNodeReply:
        def work() -> tuple[dict[str, float], dict[str, float]] | None:
            update = partial(self.optimizer.step, request.lr, self.loss_scale, request.clip_factor)
            measured = None
            if request.skip:
                pass  # every PNode drops this step's gradients
            elif request.measure_update:
                measured = measured_update(self.optimizer, self.runtime.owners(), update)
            else:
                update()
            self.runtime.zero_grad()
            return measured

        measured = await self._compute(work)
        updates, weights = measured or (None, None)
        return PNodeReply(ok=True, pnode=self.pnode, step=request.step, update_sq_norms=updates, weight_sq_norms=weights)

    async def _run(self, p: _Pass, deadline_s: float) -> PNodeReply:
        self.current = PassId(p.phase, p.step)
        for key in [k for k in self.inbox if k.phase == p.phase and k.step < p.step]:
            del self.inbox[key]
        self.runtime.drop()
        # the loss is the mean over every token of the pass, whatever the micro-batch split
        pass_tokens = self.plan.batches.micro_batch_size * self.plan.batches.context * p.micro_batches
        fetches = [asyncio.ensure_future(self._fetch(p, m)) for m in range(p.micro_batches)] if self.reads_data else []
        forward_todo = [(m, v) for m in range(p.micro_batches) for v in self.local]
        backward_todo = [(m, v) for m in range(p.micro_batches) for v in reversed(self.local)] if p.backward else []
        loss_sum, tokens, compute_s, wait_s = 0.0, 0, 0.0, 0.0
        give_up = time.monotonic() + deadline_s
        try:
            while forward_todo or backward_todo:
                item = None
                if backward_todo and self._backward_ready(p, *backward_todo[0]):
                    item = ("bwd", backward_todo.pop(0))
                else:
                    for n, fwd in enumerate(forward_todo):
                        if self._forward_ready(p, *fwd):
                            item = ("fwd", forward_todo.pop(n))
                            break
                if item is None:
                    wait_s += await self._wait(p, give_up, deadline_s, (backward_todo or forward_todo)[0])
                    continue
                kind, (m, vid) = item
                t0 = time.monotonic()
                if kind == "fwd":
                    loss = await self._forward(p, m, vid)
                    if loss is not None:
                        loss_sum += loss
                        tokens += pass_tokens // p.micro_batches
                else:
                    await self._backward(p, m, vid, pass_tokens)
                compute_s += time.monotonic() - t0
        finally:
            for task in fetches:
                task.cancel()
            if not p.backward:
                self.runtime.drop()
        # for the orchestrator's overflow check and global clipping: None when not finite
        norms = await self._compute(self.runtime.grad_sq_norms, self.loss_scale) if p.backward else {}
        return PNodeReply(
            ok=True, pnode=self.pnode, step=p.step, loss_sum=loss_sum if self.has_loss else None,
            tokens=tokens, grads_finite=norms is not None, grad_sq_norms=norms if p.backward else None,
            compute_s=compute_s, wait_s=wait_s,
        )

    async def _wait(self, p: _Pass, give_up: float, deadline_s: float, waiting: tuple) -> float:
        self.arrived.clear()
        t0 = time.monotonic()
        if t0 >= give_up:
            raise StepAborted(f"{p.phase} step {p.step}: inputs of {waiting} did not arrive within {deadline_s:.0f}s")
        try:
            await asyncio.wait_for(self.arrived.wait(), timeout=min(give_up - t0, 1.0))
        except asyncio.TimeoutError:
            pass
        if self.current != PassId(p.phase, p.step):
            raise StepAborted(f"{p.phase} step {p.step} was superseded by {self.current}")
        return time.monotonic() - t0

    # -- readiness ---------------------------------------------------------------
    def _forward_ready(self, p: _Pass, m: int, vid: str) -> bool:
        for name in self.graph.vnodes[vid].inputs:
            if name in DATA_INPUTS:
                ready = m in p.batches
            elif name in self.runtime.modules:
                ready = (m, name) in p.outputs
            else:
                ready = ActivationKey(p.phase, p.step, m, name) in self.inbox
            if not ready:
                return False
        return True

    def _backward_ready(self, p: _Pass, m: int, vid: str) -> bool:
        if (m, vid) not in p.done_forward:
            return False
        for consumer in self._consumers[vid]:
            if consumer in self.runtime.modules:
                if consumer not in p.grads[(m, vid)]:
                    return False
            elif GradientKey(p.phase, p.step, m, vid, consumer) not in self.inbox:
                return False
        return True

    # -- work items ----------------------------------------------------------------
    async def _fetch(self, p: _Pass, m: int) -> None:
        p.batches[m] = await p.feed.get(p.step if p.backward else 0, m, prefetch=p.backward)
        self.arrived.set()

    async def _forward(self, p: _Pass, m: int, vid: str) -> float | None:
        spec = self.graph.vnodes[vid]
        inputs = []
        for name in spec.inputs:
            if name == "data.tokens":
                inputs.append(p.batches[m][:, :-1])
            elif name == "data.targets":
                inputs.append(p.batches[m][:, 1:])
            elif name in self.runtime.modules:
                inputs.append(p.outputs[(m, name)])
            else:
                inputs.append(self.inbox[ActivationKey(p.phase, p.step, m, name)])  # other local VNodes may read it too
        out = await self._compute(self.runtime.forward, vid, m, inputs)
        p.done_forward.add((m, vid))
        if not p.backward:
            self.runtime.drop_one(m, vid)
        if OPS[spec.op].is_loss:
            return float(out)
        p.outputs[(m, vid)] = out
        remote = {self.plan.assignment[c] for c in self._consumers[vid]} - {self.pnode}
        route = TensorRoute.activation(self.plan.session_id, p.phase, p.step, m, src=vid)
        for pnode in sorted(remote):
            await self.send(pnode, out, route)
        return None

    async def _backward(self, p: _Pass, m: int, vid: str, pass_tokens: int) -> None:
        spec = self.graph.vnodes[vid]
        if OPS[spec.op].is_loss:
            grad_out = loss_gradient(self.loss_scale, pass_tokens, self.runtime.device)
        else:
            parts = p.grads.pop((m, vid), {})
            for consumer in self._consumers[vid]:
                if consumer not in self.runtime.modules:
                    parts[consumer] = self.inbox.pop(GradientKey(p.phase, p.step, m, vid, consumer))
            grad_out = summed_in_order([parts[c] for c in self._consumers[vid]])
            if grad_out is None:  # an output nothing reads: nothing flows back
                self.runtime.drop_one(m, vid)
                return
        input_grads = await self._compute(self.runtime.backward, vid, m, grad_out)
        for name, g in gradients_by_input(spec.inputs, input_grads).items():
            if name in self.runtime.modules:
                p.grads[(m, name)][vid] = g
            else:
                route = TensorRoute.gradient(self.plan.session_id, p.phase, p.step, m, src=name, consumer=vid)
                await self.send(self.plan.assignment[name], g, route)

    async def _compute(self, fn, *args):
        """Torch work runs on the PNode's one compute thread, so the event loop keeps heartbeating."""
        return await asyncio.get_running_loop().run_in_executor(self.executor, fn, *args)
