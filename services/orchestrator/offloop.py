"""Pure-Python heavy work (network validation, allocation) in a child process, never on the event loop.

Each job runs in a fresh process forked from a forkserver that has already imported the network
library and the allocator, so a job starts in about 20 ms. A process, not a thread: a thread
running pure Python holds the GIL, so the event loop (heartbeats, commands, every session's
steps) would only get turns between its time slices, and a thread can be neither killed nor
capped. A child gets an address-space cap and is killed when it overruns its time limit; the
event loop only waits on a pipe. Arguments and results are plain data over a pipe between this
process and its own child (never anything read from the network or disk).
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import resource
from collections.abc import Callable
from typing import Any, TypeVar

log = logging.getLogger("computeall.orchestrator.offloop")

T = TypeVar("T")

# imported once by the forkserver, so that no job pays for them
PRELOAD = ["computeall.orchestrator.network_jobs"]


class JobError(RuntimeError):
    """A job overran its time, ran out of memory or raised; the message says which."""


def _child(send, memory_bytes: int, function: Callable[..., Any], args: tuple) -> None:
    resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    try:
        result = (True, function(*args))
    except MemoryError:
        result = (False, f"ran out of memory (the limit is {memory_bytes >> 20} MiB)")
    except Exception as exc:  # reported to the parent, which decides; the child ends either way
        result = (False, f"{type(exc).__name__}: {exc}")
    send.send(result)


class OffLoop:
    """Runs jobs in child processes, at most `parallel` at a time."""

    def __init__(self, parallel: int = 2, memory_bytes: int = 2 << 30) -> None:
        self.memory_bytes = memory_bytes
        self._context = multiprocessing.get_context("forkserver")
        self._context.set_forkserver_preload(PRELOAD)
        self._slots = asyncio.Semaphore(parallel)

    async def warm(self) -> None:
        """Start the forkserver now (it imports PRELOAD), so the first real job starts fast."""
        await self.run(int, (), timeout_s=60.0)

    async def run(self, function: Callable[..., T], args: tuple, timeout_s: float) -> T:
        """`function(*args)` in a child process; `JobError` when it fails or takes longer than `timeout_s`."""
        async with self._slots:
            receive, send = self._context.Pipe(duplex=False)
            process = self._context.Process(target=_child, args=(send, self.memory_bytes, function, args), daemon=True)
            await asyncio.to_thread(process.start)
            send.close()  # the child holds the only writer: its end is our end-of-file
            reading = asyncio.ensure_future(asyncio.to_thread(receive.recv))
            try:
                ok, value = await asyncio.wait_for(asyncio.shield(reading), timeout_s)
            except asyncio.TimeoutError:
                raise JobError(f"took longer than {timeout_s:g} s") from None
            except EOFError:
                raise JobError(f"its process died (exit code {await asyncio.to_thread(_ended, process)})") from None
            finally:
                if process.is_alive():
                    process.kill()
                await asyncio.to_thread(process.join)
                await asyncio.gather(reading, return_exceptions=True)  # the reader is done before its pipe closes
                receive.close()
        if not ok:
            raise JobError(value)
        return value


def _ended(process) -> int | None:
    process.join(5.0)
    return process.exitcode
