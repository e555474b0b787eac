"""A rollback or reload drops the batches a PNode prefetched for the steps it expected next."""

import asyncio

import numpy as np
import pytest
import torch

from computeall.protocol.credentials import Credential
from computeall.pnode import batches, checkpoints
from computeall.pnode.node import PNode
from computeall.protocol.config import OptimizerConfig
from computeall.protocol.pnode_api import BatchSource, LoadCheckpoint, LoadPlan, Reset, Unload
from computeall.protocol.subjects import Subjects

from ..tensorcore.helpers import tiny_graph

SESSION = "s1"


class FakeDataset:
    """Stands in for the dataset service: answers at once, except prefetches of `hold_step`, which
    wait (as a slow service would) until cancelled; every fetch task is kept, to look at after."""

    def __init__(self, hold_step: int) -> None:
        self.hold_step = hold_step
        self.tasks: dict[int, list[asyncio.Task]] = {}

    async def fetch_batch(self, nc, subjects, request, timeout):
        self.tasks.setdefault(request.step, []).append(asyncio.current_task())
        if request.step == self.hold_step:
            await asyncio.Event().wait()
        ids = np.zeros((request.batch, request.context + 1), dtype=np.int64)
        return "int64", list(ids.shape), bytearray(ids.tobytes())


def plan() -> LoadPlan:
    graph = tiny_graph()
    return LoadPlan(
        session_id=SESSION, network=graph.spec.model_dump(), assignment={v: "p" for v in graph.order}, seed=0,
        batches=BatchSource(dataset="d", split="train", seed=0, micro_batch_size=2, context=graph.spec.context),
        micro_batches=1, optimizer=OptimizerConfig(),
    )


ROLLBACKS = {
    "LoadCheckpoint": LoadCheckpoint(session_id=SESSION, step=1, bucket="b", objects=[]),
    "LoadPlan": plan(),
    "Unload": Unload(session_id=SESSION),
    "Reset": Reset(),
}


@pytest.mark.parametrize("request_type", ROLLBACKS)
async def test_a_prefetch_past_the_rollback_point_is_dropped(monkeypatch, request_type):
    dataset = FakeDataset(hold_step=4)
    monkeypatch.setattr(batches, "fetch_batch", dataset.fetch_batch)

    async def loaded(js, stage, request):  # the checkpoint's tensors are not the point here
        return None

    monkeypatch.setattr(checkpoints, "load", loaded)
    pnode = PNode(Credential(role="pnode", name="p"), 1 << 30, torch.device("cpu"), Subjects("ca"))
    pnode.nc = pnode.js = None
    try:
        assert (await pnode.dispatch(plan())).ok
        feed = pnode.stages[SESSION].train_feed
        batch = await feed.get(3, 0)  # step 3 trains, and step 4 is prefetched
        assert batch.shape == (2, 17)
        await asyncio.sleep(0)  # let the prefetch start
        (prefetch,) = dataset.tasks[4]
        assert not prefetch.done()

        assert (await pnode.dispatch(ROLLBACKS[request_type])).ok
        await asyncio.sleep(0)
        assert prefetch.cancelled()  # dropped, not left holding a batch for a step that is not next

        if request_type == "LoadCheckpoint":  # the stage goes on: step 4 is asked for again when it comes
            dataset.hold_step = None
            await pnode.stages[SESSION].train_feed.get(4, 0, prefetch=False)
            assert len(dataset.tasks[4]) == 2
    finally:
        pnode.executor.shutdown(wait=True)
