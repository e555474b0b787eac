"""A PNode measures what the allocator needs to know of it: how fast it computes and reaches the bus.

Compute: the forward and backward of a small two-layer MLP, whose FLOPs count the way the op
registry counts them (6 per weight per token), so the figure is in the allocator's units; best of
a few tries, timed in CPU time on a CPU (a busy machine must not make the device look slower than
it is, nor make two alike PNodes measure differently) and scaled by the PNode's torch threads.

Link: the round trip of a PING to the NATS server, and the rate at which bytes published to this
PNode's own probe subject come back (they cross the link both ways at once, so the rate is the
slower direction's). The payload doubles until a round takes long enough to time.
"""

from __future__ import annotations

import asyncio
import statistics
import time

import torch
from nats.aio.client import Client as NATS

from computeall.protocol.throughput import Throughput

PROBE_CHUNK = 256 * 1024
FIRST_PAYLOAD = 1 << 20
MAX_PAYLOAD = 16 << 20
LONG_ENOUGH_S = 0.3  # a round this long is past TCP slow start on a city link, and timed well enough


def compute_flops_per_s(device: torch.device, tokens: int = 256, dim: int = 256, hidden: int = 1024,
                        tries: int = 3) -> float:
    generator = torch.Generator().manual_seed(0)
    first, second = torch.nn.Linear(dim, hidden), torch.nn.Linear(hidden, dim)
    mlp = torch.nn.Sequential(first, torch.nn.ReLU(), second).to(device)
    x = torch.randn(tokens, dim, generator=generator).to(device)
    flops = 6.0 * (first.weight.numel() + second.weight.numel()) * tokens

    def best_seconds() -> float:
        mlp(x).sum().backward()  # the first run pays for allocations and lazy set-up
        return min(_seconds(device, lambda: mlp(x).sum().backward()) for _ in range(tries))

    if device.type != "cpu":
        return flops / best_seconds()
    # On a CPU: one thread's rate in CPU time, times the threads. Wall time would count other
    # processes of a busy machine against the device (two alike PNodes would measure apart), and
    # several threads' CPU time counts their spin-waits as work.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return threads * flops / best_seconds()
    finally:
        torch.set_num_threads(threads)


def _seconds(device: torch.device, work) -> float:
    """How long `work` takes: CPU time of this process on a CPU, wall time (synchronised) elsewhere."""
    if device.type == "cpu":
        t0 = time.process_time()
        work()
        return time.process_time() - t0
    t0 = time.perf_counter()
    work()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - t0


async def round_trip_s(nc: NATS, tries: int = 5) -> float:
    times = []
    for _ in range(tries):
        t0 = time.perf_counter()
        await nc.flush(timeout=10)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


async def bandwidth_bytes_per_s(nc: NATS, subject: str, rtt_s: float) -> float:
    """Bytes/s of a stream published to `subject` (which only this PNode reads) and received back."""
    chunk = min(PROBE_CHUNK, nc.max_payload)
    received = 0
    done = asyncio.Event()
    target = 0

    async def on_chunk(msg) -> None:
        nonlocal received
        received += len(msg.data)
        if received >= target:
            done.set()

    sub = await nc.subscribe(subject, cb=on_chunk, pending_bytes_limit=2 * MAX_PAYLOAD)
    try:
        await nc.flush()
        payload, data = FIRST_PAYLOAD, bytes(chunk)
        while True:
            received, target = 0, payload
            done.clear()
            t0 = time.perf_counter()
            for _ in range(payload // chunk):
                await nc.publish(subject, data)
            await asyncio.wait_for(done.wait(), timeout=60)
            elapsed = time.perf_counter() - t0
            if elapsed >= LONG_ENOUGH_S or payload >= MAX_PAYLOAD:
                return payload / max(elapsed - rtt_s, 1e-6)
            payload *= 2
    finally:
        await sub.unsubscribe()


async def measure(nc: NATS, probe_subject: str, flops_per_s: float) -> Throughput:
    rtt = await round_trip_s(nc)
    bandwidth = await bandwidth_bytes_per_s(nc, probe_subject, rtt)
    return Throughput(flops_per_s=flops_per_s, bandwidth_bytes_per_s=bandwidth, rtt_s=rtt, measured_at=time.time())
