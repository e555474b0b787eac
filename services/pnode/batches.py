"""Batches for the VNodes that read the dataset, fetched over NATS and prefetched a step ahead."""

from __future__ import annotations

import asyncio

import torch
from nats.aio.client import Client as NATS

from computeall.protocol.dataset_api import BatchRequest
from computeall.protocol.dataset_client import fetch_batch
from computeall.protocol.pnode_api import BatchSource
from computeall.protocol.subjects import Subjects
from computeall.protocol.wire import Tensor
from computeall.tensorcore.wire import tensor_from_wire


class BatchFeed:
    def __init__(self, nc: NATS, subjects: Subjects, source: BatchSource, split: str, micro_batches: int) -> None:
        self.nc = nc
        self.subjects = subjects
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
                split=self.split,
                seed=self.source.seed,
                step=self.start_step + step,
                micro=micro,
                micro_batches=self.micro_batches,
                batch=self.source.micro_batch_size,
                context=self.source.context,
            )
            self._tasks[key] = asyncio.ensure_future(fetch_batch(self.nc, self.subjects, request, timeout=60.0))
        return self._tasks[key]

    async def get(self, step: int, micro: int, prefetch: bool = True) -> torch.Tensor:
        """Token ids (B, T+1) as int64; also starts fetching the same micro-batch of the next step."""
        task = self._fetch(step, micro)
        if prefetch:
            self._fetch(step + 1, micro)
        try:
            dtype, shape, data = await task
        finally:
            self._tasks.pop((step, micro), None)
        return tensor_from_wire(Tensor("batch", dtype, shape, data, {})).long()

    def forget(self) -> None:
        """Drop prefetches (after a rollback the next steps are not what was guessed)."""
        for task in self._tasks.values():
            task.cancel()
        self._tasks.clear()
