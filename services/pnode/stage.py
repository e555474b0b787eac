"""One session's part of the network on this PNode: data-driven forward and backward of a step.

Work items are (micro, VNode) pairs. A forward item runs as soon as its inputs are
here (from a local VNode, another PNode, or the dataset). Backward items run in one
fixed order: micro-batches in order, VNodes in reverse topological order. That order
never waits on anything a later item produces, so it cannot deadlock, and gradients
accumulate in the same order on every placement: 1 PNode or 5 compute the same bits.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from concurrent.futures import Executor
from typing import Awaitable, Callable

import torch

from computeall.network import Graph, NetworkSpec
from computeall.network.ops import DATA_INPUTS, OPS
from computeall.protocol.pnode_api import ApplyStep, LoadPlan, PNodeReply, RunStep
from computeall.tensorcore.optimizer import VNodeOptimizer
from computeall.tensorcore.vnode_runtime import VNodeRuntime

from .batches import BatchFeed

log = logging.getLogger("computeall.pnode.stage")

# (pnode to send to, key, tensor, meta) -> sent
Send = Callable[[str, str, torch.Tensor, dict], Awaitable[None]]


class StepAborted(RuntimeError):
    pass


class SessionStage:
    def __init__(self, plan: LoadPlan, pnode: str, device: torch.device, executor: Executor, feed: BatchFeed, send: Send):
        self.plan = plan
        self.pnode = pnode
        self.executor = executor
        self.feed = feed
        self.send = send
        self.graph = Graph(NetworkSpec.model_validate(plan.network))
        self.local = [v for v in self.graph.order if plan.assignment[v] == pnode]
        self.runtime = VNodeRuntime(self.graph, self.local, plan.seed, device)
        self.optimizer = VNodeOptimizer(self.runtime.parameters(), plan.optimizer)
        self.inbox: dict[tuple, torch.Tensor] = {}
        self.arrived = asyncio.Event()
        self.current_step = -1
        self.loss_scale = 1.0
        self._consumers = {v: self.graph.consumers(v) for v in self.local}

    # -- tensors from other PNodes --------------------------------------------
    def receive(self, meta: dict, tensor: torch.Tensor) -> None:
        step = int(meta["step"])
        if step < self.current_step:
            return  # from an aborted or finished step
        if meta["kind"] == "act":
            key = ("act", step, int(meta["micro"]), str(meta["src"]))
        else:
            key = ("grad", step, int(meta["micro"]), str(meta["src"]), str(meta["consumer"]))
        self.inbox[key] = tensor
        self.arrived.set()

    # -- a step ----------------------------------------------------------------
    async def run_step(self, request: RunStep, deadline_s: float) -> PNodeReply:
        step = request.step
        self.current_step = step
        self.loss_scale = request.loss_scale
        for key in [k for k in self.inbox if k[1] < step]:
            del self.inbox[key]
        self.runtime.drop()
        self.runtime.zero_grad()

        micro_batches = self.plan.micro_batches
        step_tokens = self.plan.batches.micro_batch_size * self.plan.batches.context * micro_batches
        reads_data = any(i in DATA_INPUTS for v in self.local for i in self.graph.vnodes[v].inputs)
        batches: dict[int, torch.Tensor] = {}
        fetches = [
            asyncio.ensure_future(self._fetch(step, m, batches)) for m in range(micro_batches)
        ] if reads_data else []

        outputs: dict[tuple[int, str], torch.Tensor] = {}
        grads: dict[tuple[int, str], dict[str, torch.Tensor]] = defaultdict(dict)
        forward_todo = [(m, v) for m in range(micro_batches) for v in self.local]
        backward_todo = [(m, v) for m in range(micro_batches) for v in reversed(self.local)]
        done_forward: set[tuple[int, str]] = set()
        loss_sum, tokens, compute_s, wait_s = 0.0, 0, 0.0, 0.0
        give_up = time.monotonic() + deadline_s
        try:
            while forward_todo or backward_todo:
                item = None
                if backward_todo and self._backward_ready(step, *backward_todo[0], done_forward, grads):
                    item = ("bwd", backward_todo.pop(0))
                else:
                    for n, fwd in enumerate(forward_todo):
                        if self._forward_ready(step, *fwd, outputs, batches):
                            item = ("fwd", forward_todo.pop(n))
                            break
                if item is None:
                    self.arrived.clear()
                    t0 = time.monotonic()
                    remaining = give_up - t0
                    if remaining <= 0:
                        waiting = (backward_todo or forward_todo)[0]
                        raise StepAborted(
                            f"step {step}: inputs of {waiting} did not arrive within {deadline_s:.0f}s"
                        )
                    try:
                        await asyncio.wait_for(self.arrived.wait(), timeout=min(remaining, 1.0))
                    except asyncio.TimeoutError:
                        pass
                    if self.current_step != step:
                        raise StepAborted(f"step {step} was superseded by step {self.current_step}")
                    wait_s += time.monotonic() - t0
                    continue
                kind, (m, vid) = item
                t0 = time.monotonic()
                if kind == "fwd":
                    loss = await self._forward(step, m, vid, outputs, batches)
                    done_forward.add((m, vid))
                    if loss is not None:
                        loss_sum += loss
                        tokens += step_tokens // micro_batches
                else:
                    await self._backward(step, m, vid, grads, step_tokens)
                compute_s += time.monotonic() - t0
        finally:
            for task in fetches:
                task.cancel()
        finite = await self._compute(self.runtime.grads_finite)
        has_loss = any(OPS[self.graph.vnodes[v].op].is_loss for v in self.local)
        return PNodeReply(
            ok=True,
            pnode=self.pnode,
            step=step,
            loss_sum=loss_sum if has_loss else None,
            tokens=tokens,
            grads_finite=finite,
            compute_s=compute_s,
            wait_s=wait_s,
        )

    async def apply(self, request: ApplyStep) -> PNodeReply:
        def work() -> None:
            if not request.skip:
                self.optimizer.step(request.lr, self.loss_scale)
            self.runtime.zero_grad()

        await self._compute(work)
        return PNodeReply(ok=True, pnode=self.pnode, step=request.step)

    # -- readiness ---------------------------------------------------------------
    def _forward_ready(self, step: int, m: int, vid: str, outputs: dict, batches: dict) -> bool:
        for name in self.graph.vnodes[vid].inputs:
            if name in DATA_INPUTS:
                ready = m in batches
            elif name in self.runtime.modules:
                ready = (m, name) in outputs
            else:
                ready = ("act", step, m, name) in self.inbox
            if not ready:
                return False
        return True

    def _backward_ready(self, step: int, m: int, vid: str, done_forward: set, grads: dict) -> bool:
        if (m, vid) not in done_forward:
            return False
        for consumer in self._consumers[vid]:
            if consumer in self.runtime.modules:
                if consumer not in grads[(m, vid)]:
                    return False
            elif ("grad", step, m, vid, consumer) not in self.inbox:
                return False
        return True

    # -- work items ----------------------------------------------------------------
    async def _fetch(self, step: int, m: int, batches: dict) -> None:
        batches[m] = await self.feed.get(step, m)
        self.arrived.set()

    async def _forward(self, step: int, m: int, vid: str, outputs: dict, batches: dict) -> float | None:
        spec = self.graph.vnodes[vid]
        inputs = []
        for name in spec.inputs:
            if name == "data.tokens":
                inputs.append(batches[m][:, :-1])
            elif name == "data.targets":
                inputs.append(batches[m][:, 1:])
            elif name in self.runtime.modules:
                inputs.append(outputs[(m, name)])
            else:
                inputs.append(self.inbox[("act", step, m, name)])  # other local VNodes may read it too
        out = await self._compute(self.runtime.forward, vid, m, inputs)
        if OPS[spec.op].is_loss:
            return float(out)
        outputs[(m, vid)] = out
        remote = {self.plan.assignment[c] for c in self._consumers[vid]} - {self.pnode}
        for pnode in sorted(remote):
            meta = {"session": self.plan.session_id, "step": step, "micro": m, "kind": "act", "src": vid}
            await self.send(pnode, f"{self.plan.session_id}/{step}/{m}/act/{vid}", out, meta)
        return None

    async def _backward(self, step: int, m: int, vid: str, grads: dict, step_tokens: int) -> None:
        spec = self.graph.vnodes[vid]
        if OPS[spec.op].is_loss:
            # d(loss_sum * scale / step_tokens): the step's loss is the mean over all its tokens
            grad_out = torch.tensor(self.loss_scale / step_tokens, device=self.runtime.device)
        else:
            parts = grads.pop((m, vid), {})
            for consumer in self._consumers[vid]:
                if consumer not in self.runtime.modules:
                    parts[consumer] = self.inbox.pop(("grad", step, m, vid, consumer))
            # sum in the graph's consumer order, the same on every placement
            ordered = [parts[c] for c in self._consumers[vid]]
            if not ordered:  # an output nothing reads: nothing flows back
                self.runtime.drop_one(m, vid)
                return
            grad_out = ordered[0]
            for g in ordered[1:]:
                grad_out = grad_out + g
        input_grads = await self._compute(self.runtime.backward, vid, m, grad_out)
        per_input: dict[str, torch.Tensor] = {}
        for name, g in zip(spec.inputs, input_grads):
            if g is not None:
                per_input[name] = g if name not in per_input else per_input[name] + g
        for name, g in per_input.items():
            if name in self.runtime.modules:
                grads[(m, name)][vid] = g
            else:
                meta = {
                    "session": self.plan.session_id, "step": step, "micro": m,
                    "kind": "grad", "src": name, "consumer": vid,
                }
                await self.send(self.plan.assignment[name], f"{self.plan.session_id}/{step}/{m}/grad/{name}/{vid}", g, meta)

    async def _compute(self, fn, *args):
        """Torch work runs on the PNode's one compute thread, so the event loop keeps heartbeating."""
        return await asyncio.get_running_loop().run_in_executor(self.executor, fn, *args)
