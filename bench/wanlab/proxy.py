"""A userspace one-way delay for TCP: what the lab uses where the kernel has no netem.

Each accepted connection is paired with one upstream connection; each direction is a pump that
reads a chunk, stamps it with the time it may leave (now + delay, +- jitter) and writes it out
no earlier than that. Stamps never decrease, so jitter never reorders; the queue between reading
and writing holds at most `max_buffered` bytes, so a slow receiver backs up to the sender as TCP
would. What this does not model: connection set-up costs no extra round trip (the client's
connect completes locally), and delay applies per chunk read, not per packet.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
from dataclasses import dataclass
from typing import Callable

CHUNK = 64 * 1024


@dataclass(frozen=True)
class Delay:
    seconds: float = 0.0
    jitter: float = 0.0  # uniform in [-jitter, +jitter], clipped so a chunk never leaves early or out of order


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: Delay, max_buffered: int,
                rng: random.Random) -> None:
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[float, bytes] | None] = asyncio.Queue(maxsize=max(1, max_buffered // CHUNK))

    async def read() -> None:
        last = 0.0
        while chunk := await reader.read(CHUNK):
            extra = delay.seconds + (rng.uniform(-delay.jitter, delay.jitter) if delay.jitter else 0.0)
            last = max(last, loop.time() + max(0.0, extra))  # never earlier than the chunk before it
            await queue.put((last, chunk))
        await queue.put(None)

    async def write() -> None:
        while (item := await queue.get()) is not None:
            leave_at, chunk = item
            if (wait := leave_at - loop.time()) > 0:
                await asyncio.sleep(wait)
            writer.write(chunk)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()  # half-close: the other direction may still be talking

    reading = asyncio.ensure_future(read())
    try:
        await write()
        await reading
    finally:
        reading.cancel()


class DelayProxy:
    """Serves `listener`; forwards each connection to `target`, every chunk after `delay`, both ways.

    `dial` makes the (unconnected) upstream socket: the lab passes one that creates it inside a
    network namespace, so the upstream leg leaves through that namespace's link.
    """

    def __init__(self, listener: socket.socket, target: tuple[str, int], delay: Delay, *,
                 dial: Callable[[], socket.socket] | None = None, max_buffered: int = 8 << 20,
                 seed: int = 0) -> None:
        self.listener = listener
        self.target = target
        self.delay = delay
        self.dial = dial or (lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM))
        self.max_buffered = max_buffered
        self.rng = random.Random(seed)
        self.address: tuple[str, int] = listener.getsockname()[:2]
        self._server: asyncio.base_events.Server | None = None
        self._connections: set[asyncio.Task] = set()

    async def start(self) -> None:
        self.listener.setblocking(False)
        self._server = await asyncio.start_server(self._handle, sock=self.listener)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)

    async def _handle(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        self._connections.add(task)
        sock = upstream_writer = None
        try:
            sock = self.dial()
            sock.setblocking(False)
            await asyncio.get_running_loop().sock_connect(sock, self.target)
            upstream_reader, upstream_writer = await asyncio.open_connection(sock=sock)
            for w in (client_writer, upstream_writer):
                w.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            await asyncio.gather(
                _pump(client_reader, upstream_writer, self.delay, self.max_buffered, self.rng),
                _pump(upstream_reader, client_writer, self.delay, self.max_buffered, self.rng))
        except (ConnectionError, OSError):
            pass  # either end went away: close both, as a broken link would
        except asyncio.CancelledError:
            pass  # the lab is closing; finishing normally keeps asyncio's stream callback quiet
        finally:
            if upstream_writer is None and sock is not None:
                sock.close()  # the upstream never connected
            for w in (client_writer, upstream_writer):
                if w is not None:
                    w.close()
                    with contextlib.suppress(Exception):
                        await w.wait_closed()
            self._connections.discard(task)
