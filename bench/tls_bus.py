"""What TLS costs the bus: tensor-sized messages from one PNode identity to another, through a
server listening with TLS (as `up --public` does) against the same server on plain loopback.
Both authenticate every connection; rounds alternate, so a busy minute hits both alike. What TLS
costs a training step is train_throughput's figure (2 PNodes over TLS / over loopback).

    python -m bench.tls_bus [--quick] [--json PATH]
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

from computeall.cli.nats_server import EmbeddedNats, free_port
from computeall.protocol import bus
from computeall.protocol.subjects import Subjects

from .common import Bench
FRAME = 4 << 20  # a micro-batch's activations travel in frames of a few MiB
WINDOW = 4
S = Subjects()


async def send(server: EmbeddedNats, frames: int) -> float:
    """Bytes per second from PNode `a` to PNode `b`, in windows of `WINDOW` frames (a step's sends;
    an unpaced burst would only measure the server dropping a slow consumer)."""
    sender = await bus.connect(server.credential("pnode", "a"), name="bench-a")
    receiver = await bus.connect(server.credential("pnode", "b"), name="bench-b")
    received, arrived = 0, asyncio.Event()

    async def on_frame(msg) -> None:
        nonlocal received
        received += 1
        arrived.set()

    await receiver.subscribe(S.pnode_tensor_all("b"), cb=on_frame, pending_bytes_limit=1 << 30)
    await receiver.flush()
    payload = bytes(FRAME)
    t0 = time.perf_counter()
    for sent in range(WINDOW, frames + WINDOW, WINDOW):
        for _ in range(WINDOW):
            await sender.publish(S.pnode_tensor("b", "a"), payload)
        while received < sent:
            arrived.clear()
            await asyncio.wait_for(arrived.wait(), 60)
    seconds = time.perf_counter() - t0
    await sender.close()
    await receiver.close()
    return sent * FRAME / seconds


async def measure(bench: Bench, rounds: int, frames: int) -> None:
    with tempfile.TemporaryDirectory(prefix="bench-tls-") as tmp:
        plain = EmbeddedNats(Path(tmp) / "plain").start()
        tls = EmbeddedNats(Path(tmp) / "tls", listen=f"127.0.0.1:{free_port()}").start()
        try:
            speeds: dict[str, list[float]] = {"loopback": [], "tls": []}
            for _ in range(rounds):
                speeds["loopback"].append(await send(plain, frames))
                speeds["tls"].append(await send(tls, frames))
        finally:
            plain.stop()
            tls.stop()
    loopback, secured = (statistics.median(speeds[k]) for k in ("loopback", "tls"))
    bench.row(f"PNode to PNode, {frames} frames of {FRAME >> 20} MiB over TLS (median of {rounds} rounds)", "bytes/s",
              secured, "the same over plain loopback", loopback)


def main() -> int:
    bench = Bench("tls_bus", __doc__, quick_help="fewer rounds")
    args = bench.parse()
    asyncio.run(measure(bench, *((3, 32) if args.quick else (7, 64))))
    return bench.finish()


if __name__ == "__main__":
    sys.exit(main())
