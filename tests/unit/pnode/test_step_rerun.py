"""A step run again while its first try still waits on a tensor lost with a nats-server: the first
try gives up, the step's results and the weights it leads to are the bits of a run without the
loss, and the lost tensor arriving late (from the abandoned try) changes nothing.

Two real PNodes (torch stages) pass frames to each other in-process; one frame is held back."""

import asyncio
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from computeall.pnode import batches
from computeall.pnode.member import PassSuperseded
from computeall.pnode.node import PNode
from computeall.protocol.config import OptimizerConfig
from computeall.protocol.credentials import Credential
from computeall.protocol.pnode_api import ApplyStep, BatchSource, LoadPlan, RunStep
from computeall.protocol.subjects import Subjects

from ..tensorcore.helpers import tiny_graph

SESSION = "s1"


async def fetch_batch(nc, subjects, request, timeout):
    """Stands in for the dataset service: the same ids for the same (step, micro)."""
    rng = np.random.default_rng(request.step * 100 + request.micro)
    ids = rng.integers(0, 64, (request.batch, request.context + 1), dtype=np.int64)
    return "int64", list(ids.shape), bytearray(ids.tobytes())


class Bus:
    """Frames between the PNodes, delivered at once; `hold` keeps the next one back (lost, for now)."""

    def __init__(self) -> None:
        self.pnodes: dict[str, PNode] = {}
        self.hold = False
        self.held: list[tuple[str, SimpleNamespace]] = []

    def join(self, name: str) -> PNode:
        pnode = PNode(Credential(role="pnode", name=name), 1 << 30, torch.device("cpu"), Subjects("ca"))
        pnode.nc, pnode.js = SimpleNamespace(max_payload=1 << 20), None

        async def publish(to: str, frames: list[bytes]) -> None:
            subject = pnode.subjects.pnode_tensor(to, name)  # as nats-server lets this PNode publish
            for frame in frames:
                if self.hold:
                    self.hold = False
                    self.held.append((to, SimpleNamespace(subject=subject, data=frame)))
                    continue
                await self.pnodes[to].on_tensor(SimpleNamespace(subject=subject, data=frame))

        pnode._publish_frames = publish
        self.pnodes[name] = pnode
        return pnode

    async def release(self) -> None:
        for to, msg in self.held:
            await self.pnodes[to].on_tensor(msg)


def plan() -> LoadPlan:
    graph = tiny_graph()
    # the embedding and the head tied to it on a, the blocks on b: tensors cross both ways
    assignment = {v: "a" if v in ("embed", "head") else "b" for v in graph.order}
    return LoadPlan(
        session_id=SESSION, network=graph.spec.model_dump(), assignment=assignment, seed=0,
        batches=BatchSource(dataset="d", split="train", seed=0, micro_batch_size=2, context=graph.spec.context),
        micro_batches=2, optimizer=OptimizerConfig(),
    )


async def all_of(bus: Bus, request) -> list:
    return list(await asyncio.gather(*(p.dispatch(request) for p in bus.pnodes.values())))


async def two_steps(bus: Bus, lose_a_frame: bool) -> tuple[list, dict[str, torch.Tensor]]:
    """Steps 0 and 1 (the second with a frame lost and run again); step 1's replies and the weights after it."""
    for name in ("a", "b"):
        bus.join(name)
    assert all(r.ok for r in await all_of(bus, plan()))
    for step in (0, 1):
        run = RunStep(session_id=SESSION, step=step)
        if step == 1 and lose_a_frame:
            bus.hold = True
            first = [asyncio.ensure_future(p.dispatch(run)) for p in bus.pnodes.values()]
            await asyncio.sleep(1.0)
            assert bus.held and not any(t.done() for t in first), "the step waits for the lost frame"
            again = asyncio.ensure_future(all_of(bus, run))
            for try_ in first:
                with pytest.raises(PassSuperseded, match="superseded"):
                    await asyncio.wait_for(try_, 30)
            await bus.release()  # the abandoned try's frame arrives after all
            replies = await asyncio.wait_for(again, 30)
        else:
            replies = await all_of(bus, run)
        assert all(r.ok for r in replies)
        await all_of(bus, ApplyStep(session_id=SESSION, step=step, lr=1e-2))
    weights = {f"{n}/{k}": v.detach().clone() for n, p in bus.pnodes.items()
               for k, v in p.stages[SESSION].runtime.parameters().items()}
    return replies, weights


async def test_a_step_run_again_after_a_lost_frame_has_the_bits_of_a_clean_run(monkeypatch):
    monkeypatch.setattr(batches, "fetch_batch", fetch_batch)
    clean_bus, lossy_bus = Bus(), Bus()
    try:
        clean, clean_weights = await two_steps(clean_bus, lose_a_frame=False)
        rerun, rerun_weights = await two_steps(lossy_bus, lose_a_frame=True)
    finally:
        for pnode in [*clean_bus.pnodes.values(), *lossy_bus.pnodes.values()]:
            pnode.executor.shutdown(wait=True)
            pnode.closed()
    for ours, theirs in zip(rerun, clean):
        assert (ours.loss_sum, ours.micro_losses, ours.grad_sq_norms) == (theirs.loss_sum, theirs.micro_losses,
                                                                          theirs.grad_sq_norms)
    assert rerun_weights.keys() == clean_weights.keys()
    assert all(torch.equal(rerun_weights[k], clean_weights[k]) for k in clean_weights), "gradients counted once"
