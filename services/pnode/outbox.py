"""Tensors leaving this PNode: a queue drained by its own task, so compute never waits on a send.

The stage `put`s a tensor in its wire form with its route and goes on with the next work item;
the outbox turns it into frames on the PNode's wire thread (digest, copies) and publishes them,
in the order they were put. It counts the bytes sent to each PNode and the time spent sending,
which the stage reports with the step. A frame the connection cannot even buffer while it
reconnects (its nats-server died) is lost as the frames in flight were: the orchestrator, told of
the reconnect, runs the step again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Awaitable, Callable

import nats.errors

from computeall.tensorcore.wire import encoded_frames
from computeall.tensorcore.wire_formats import Encoded

from .routing import TensorRoute

log = logging.getLogger("computeall.pnode.outbox")


@dataclass(frozen=True)
class Link:
    """How this PNode reaches the others: publish frames to a PNode, the largest frame, the wire thread."""

    publish: Callable[[str, list[bytes]], Awaitable[None]]
    max_payload: Callable[[], int]
    executor: Executor


@dataclass
class Traffic:
    """What a pass sent: bytes by destination PNode (frames, headers included) and seconds spent sending."""

    sent_bytes: dict[str, int]
    send_s: float


class Outbox:
    def __init__(self, link: Link) -> None:
        self.link = link
        self._queue: asyncio.Queue[tuple[str, Encoded, TensorRoute]] = asyncio.Queue()
        self._task: asyncio.Task | None = None
        self._failure: BaseException | None = None
        self._sent: dict[str, int] = defaultdict(int)
        self._send_s = 0.0

    def put(self, pnode: str, encoded: Encoded, route: TensorRoute) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.ensure_future(self._drain())
        self._queue.put_nowait((pnode, encoded, route))

    async def flush(self) -> Traffic:
        """Wait until everything put so far is published; what was sent since the last flush."""
        await self._queue.join()
        if self._failure is not None:
            failure, self._failure = self._failure, None
            raise failure
        traffic = Traffic(dict(self._sent), self._send_s)
        self._sent.clear()
        self._send_s = 0.0
        return traffic

    def clear(self) -> None:
        """Drop what is queued and what was counted (a new pass: nobody waits for an aborted one's tensors)."""
        while not self._queue.empty():
            self._queue.get_nowait()
            self._queue.task_done()
        self._failure = None
        self._sent.clear()
        self._send_s = 0.0

    def close(self) -> None:
        self.clear()
        if self._task is not None:
            self._task.cancel()

    async def _drain(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            pnode, encoded, route = await self._queue.get()
            try:
                t0 = time.monotonic()
                frames = await loop.run_in_executor(
                    self.link.executor, encoded_frames, route.wire_key, encoded, self.link.max_payload(), route.wire_meta()
                )
                await self.link.publish(pnode, frames)
                self._sent[pnode] += sum(len(f) for f in frames)
                self._send_s += time.monotonic() - t0
            except nats.errors.OutboundBufferLimitError:
                log.warning("sending %s to %s: the bus is reconnecting and its buffer is full; lost", route.wire_key, pnode)
            except Exception as exc:  # kept for the pass to raise: a send that failed must not pass silently
                log.warning("sending %s to %s failed: %s", route.wire_key, pnode, exc)
                self._failure = exc
            finally:
                self._queue.task_done()
