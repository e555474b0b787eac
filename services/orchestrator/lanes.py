"""One lane per session: a session's commands run one after another, in arrival order, while
other sessions' commands run beside them. A command that takes long (its network is checked in
a child process) delays only later commands of its own session."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable


class Lanes:
    def __init__(self, max_running: int = 64) -> None:
        self.max_running = max_running
        self._last: dict[str, asyncio.Task] = {}  # lane -> its newest task
        self._running: set[asyncio.Task] = set()

    async def submit(self, lane: str, work: Callable[[], Awaitable[None]]) -> None:
        """Queue `work` behind the lane's earlier work; waits only while `max_running` are queued or running."""
        while len(self._running) >= self.max_running:
            await asyncio.wait(self._running, return_when=asyncio.FIRST_COMPLETED)
        before = self._last.get(lane)

        async def in_turn() -> None:
            if before is not None:
                await asyncio.wait([before])  # whatever became of it
            await work()

        task = asyncio.create_task(in_turn())
        self._last[lane] = task
        self._running.add(task)
        task.add_done_callback(lambda t: self._done(lane, t))

    def _done(self, lane: str, task: asyncio.Task) -> None:
        self._running.discard(task)
        if self._last.get(lane) is task:
            del self._last[lane]

    def cancel(self) -> None:
        for task in self._running:
            task.cancel()
