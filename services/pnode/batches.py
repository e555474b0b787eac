"""Batches for the VNodes that read the dataset, fetched over NATS and prefetched a step ahead.

The PNode asks on its own subject (`dataset_api.pnode_batch_subject`) and names its session: the
dataset service serves the session's dataset to the PNodes the orchestrator granted it to.

A request or its answer lost with a nats-server (the dataset service's or this PNode's) is asked
again (`through_failover`): a batch is a pure function of its request, so asking twice is safe.
"""

from __future__ import annotations

import asyncio

import torch
from nats.aio.client import Client as NATS

from computeall.protocol.bus_failover import through_failover
from computeall.protocol.dataset_api import BatchRequest
from computeall.protocol.dataset_client import fetch_batch
from computeall.protocol.pnode_api import BatchSource
from computeall.protocol.wire import Tensor
from computeall.tensorcore.tensor_frames import tensor_from_wire

TRY_S = 20.0  # a batch takes milliseconds; one not there by then was lost
PATIENCE_S = 60.0


class BatchFeed:
    def __init__(self, nc: NATS, subject: str, session_id: str, source: BatchSource, split: str, micro_batches: int) -> None:
        self.nc = nc
        self.subject = subject
        self.session_id = session_id
        self.source = source
        self.split = split
        self.micro_batches = micro_batches
        # a session that goes on with another's data reads its training batches `start_step` steps on
        self.start_step = source.start_step if split == source.split else 0
        self._tasks: dict[tuple[int, int], asyncio.Task] = {}

    def _fetch(self, step: int, micro: int) -> asyncio.Task:
        key = (step, micro)
        if key not in self._tasks:
            request = BatchRequest(
                dataset=self.source.dataset,
                session_id=self.session_id,
                split=self.split,
                seed=self.source.seed,
                step=self.start_step + step,
                micro=micro,
                micro_batches=self.micro_batches,
                batch=self.source.micro_batch_size,
                context=self.source.context,
            )
            self._tasks[key] = asyncio.ensure_future(fetch_batch(self.nc, self.subject, request, timeout=TRY_S))
        return self._tasks[key]

    async def get(self, step: int, micro: int, prefetch: bool = True) -> torch.Tensor:
        """Token ids (B, T+1) as int64; also starts fetching the same micro-batch of the next step."""
        self._fetch(step, micro)
        if prefetch:
            self._fetch(step + 1, micro)
        dtype, shape, data = await through_failover(lambda: self._take(step, micro), f"batch {micro} of step {step}",
                                                    PATIENCE_S)
        return tensor_from_wire(Tensor("batch", dtype, shape, data, {})).long()

    async def _take(self, step: int, micro: int) -> tuple[str, list[int], bytearray]:
        """The fetch of (step, micro), asked now if it is not under way; gone from the prefetches either way."""
        try:
            return await self._fetch(step, micro)
        finally:
            self._tasks.pop((step, micro), None)

    def forget(self) -> None:
        """Drop prefetches (after a rollback the next steps are not what was guessed)."""
        for task in self._tasks.values():
            task.cancel()
        self._tasks.clear()
