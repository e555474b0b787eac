"""Bad input costs milliseconds and never stalls the orchestrator's event loop.

  - stall: the longest the event loop waits while a network at the VNode limit is checked, in a
    child process (`OffLoop`) against the anchor of checking it inline on the loop;
  - refuse: the time `load_network` takes to refuse an input over a limit (5,000 levels deep, 50,000
    VNodes, an alias bomb), against the anchor of loading micro-gpt;
  - overhead: a check of micro-gpt in a child process against the same check inline.

    python -m bench.offloop [--quick] [--json PATH]
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time

from computeall.cli.swarm import EXAMPLE, micro_gpt
from computeall.network import NetworkError, load_network
from computeall.orchestrator.network_jobs import NetworkJobs
from computeall.protocol.limits import NETWORK_VNODES

from .common import Bench, at_most

OVER_THE_LIMITS = {
    "5,000 levels deep": "name: x\nvnodes: " + "[" * 5000 + "]" * 5000,
    "50,000 VNodes": micro_gpt(8400),
    "alias bomb": "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{n}: &{n} [{', '.join([f'*{p}'] * 10)}]\n" for n, p in zip("bcdefg", "abcdef")),
}
MICRO = EXAMPLE.read_text()
AT_THE_LIMIT = micro_gpt((NETWORK_VNODES - 3) // 6)


def median_s(fn, reps: int) -> float:
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def refuse(text: str) -> None:
    try:
        load_network(text)
    except NetworkError:
        return
    raise AssertionError("an input over a limit was accepted")


async def longest_stall(work) -> float:
    """The longest gap between ticks of a 1 ms ticker while `work()` runs."""
    gaps, last, done = [0.0], time.perf_counter(), False

    async def tick():
        nonlocal last
        while not done:
            await asyncio.sleep(0.001)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    ticker = asyncio.create_task(tick())
    await asyncio.sleep(0.01)
    await work()
    done = True
    await ticker
    return max(gaps)


async def stall_and_overhead(bench: Bench, reps: int) -> None:
    jobs = NetworkJobs()
    await jobs.offloop.warm()

    async def inline():
        load_network(AT_THE_LIMIT)

    inline_stall = statistics.median([await longest_stall(inline) for _ in range(reps)])
    offloop_stall = statistics.median([await longest_stall(lambda: jobs.check(AT_THE_LIMIT)) for _ in range(reps)])
    vnodes = NETWORK_VNODES - 3 - (NETWORK_VNODES - 3) % 6
    # off the loop, the loop waits no longer than a tick; inline, it waits for the whole check
    bench.row(f"event loop's longest wait while {vnodes} VNodes are checked in a child", "s", offloop_stall,
              "the same check inline", inline_stall, at_most(0.1))
    small_inline = median_s(lambda: load_network(MICRO), reps)
    offloop_times = []
    for _ in range(reps):
        start = time.perf_counter()
        await jobs.check(MICRO)
        offloop_times.append(time.perf_counter() - start)
    bench.row("micro-gpt checked in a child process", "s", statistics.median(offloop_times),
              "the same check inline", small_inline)


def refusals(bench: Bench, reps: int) -> None:
    anchor = median_s(lambda: load_network(MICRO), reps)
    for what, text in OVER_THE_LIMITS.items():
        # an input over a limit is refused before it is built: milliseconds, a few loads of a small network
        bench.row(f"refuse {what}", "s", median_s(lambda: refuse(text), reps), "load micro-gpt", anchor, at_most(5.0))


def main() -> int:
    bench = Bench("offloop", __doc__)
    args = bench.parse()
    reps = 3 if args.quick else 11
    asyncio.run(stall_and_overhead(bench, reps))
    refusals(bench, reps)
    return bench.finish()


if __name__ == "__main__":
    sys.exit(main())
