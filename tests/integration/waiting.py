"""Waiting on a condition with a deadline: how tests order themselves after other processes.

A fixed sleep is either too short on a loaded machine or wasted on a fast one; these poll a
condition and fail with `what` once the deadline passes.
"""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(condition: Callable[[], T], timeout: float = 15.0, what: str = "condition", interval: float = 0.1) -> T:
    """The first truthy value of `condition()`; AssertionError naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not met in {timeout:g}s")
        time.sleep(interval)
    return value


async def wait_until_async(condition: Callable[[], Awaitable[T]], timeout: float = 15.0, what: str = "condition",
                           interval: float = 0.1) -> T:
    """`wait_until` for an async condition, without blocking the event loop."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not (value := await condition()):
        if loop.time() > deadline:
            raise AssertionError(f"{what} not met in {timeout:g}s")
        await asyncio.sleep(interval)
    return value


async def exit_code(process: subprocess.Popen, timeout: float) -> int:
    """`process.wait(timeout)` without blocking the event loop: an embedded cluster's authority answers on
    it (a test that waited a minute for a PNode to leave left the placement's storage grants unanswered,
    and the PNode's VNodes never moved)."""
    return await asyncio.to_thread(process.wait, timeout)
