"""In-process fan-out from the projector to GraphQL subscriptions.

Subscribers hear about rows only after their transaction committed, so whatever a client then
queries is already in the database. A slow subscriber loses its oldest notices rather than
making the projector wait or the monitor's memory grow.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from contextlib import contextmanager
from typing import Any, Iterator

QUEUE_SIZE = 1000


class PubSub:
    def __init__(self) -> None:
        self._queues: dict[str, set[asyncio.Queue]] = defaultdict(set)

    def publish(self, topic: str, item: Any) -> None:
        for queue in self._queues.get(topic, ()):
            if queue.full():
                queue.get_nowait()
            queue.put_nowait(item)

    @property
    def subscribers(self) -> int:
        """Live subscriptions, over all topics (what `{ monitor { subscriptions } }` reports)."""
        return sum(len(queues) for queues in self._queues.values())

    @contextmanager
    def subscribe(self, topic: str) -> Iterator[asyncio.Queue]:
        queue: asyncio.Queue = asyncio.Queue(QUEUE_SIZE)
        self._queues[topic].add(queue)
        try:
            yield queue
        finally:
            self._queues[topic].discard(queue)
            if not self._queues[topic]:
                del self._queues[topic]
