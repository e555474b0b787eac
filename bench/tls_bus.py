"""What TLS costs the bus: tensor-sized messages from one PNode identity to another, through a
server listening with TLS (as `up --public` does) against the same server on plain loopback.
Both authenticate every connection; rounds alternate, so a busy minute hits both alike.

    python bench/tls_bus.py [--quick] [--json PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path

from computeall.cli.nats_server import EmbeddedNats, free_port
from computeall.protocol import bus
from computeall.protocol.subjects import Subjects

RESULTS = Path(__file__).parent / "results"
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


async def measure(rounds: int, frames: int) -> dict:
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
    return {"name": "PNode to PNode tensor frames", "frame_bytes": FRAME, "frames": frames, "rounds": rounds,
            "loopback_bytes_per_s": loopback, "tls_bytes_per_s": secured, "ratio_tls_vs_loopback": secured / loopback}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds")
    parser.add_argument("--json", type=Path, default=RESULTS / "tls_bus.json")
    args = parser.parse_args()
    result = asyncio.run(measure(*((3, 32) if args.quick else (7, 64))))
    print(f"{result['frames']} frames of {FRAME >> 20} MiB, median of {result['rounds']} alternating rounds")
    print(f"loopback {result['loopback_bytes_per_s'] / 2**20:.0f} MiB/s, TLS {result['tls_bytes_per_s'] / 2**20:.0f} MiB/s, "
          f"ratio {result['ratio_tls_vs_loopback']:.3f}")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps([result], indent=1) + "\n")


if __name__ == "__main__":
    main()
