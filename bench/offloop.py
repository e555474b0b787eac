"""Bad input costs milliseconds and never stalls the orchestrator's event loop.

  - stall: the longest the event loop waits while a network at the VNode limit is checked, in a
    child process (`OffLoop`) against the anchor of checking it inline on the loop;
  - refuse: the time `load_network` takes to refuse an input over a limit (5,000 levels deep, 50,000
    VNodes, an alias bomb), against the anchor of loading micro-gpt;
  - overhead: a check of micro-gpt in a child process against the same check inline.

    python bench/offloop.py [--quick] [--json PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from pathlib import Path

from computeall.cli.swarm import EXAMPLE, micro_gpt
from computeall.network import NetworkError, load_network
from computeall.orchestrator.network_jobs import NetworkJobs
from computeall.protocol.limits import NETWORK_VNODES

OVER_THE_LIMITS = {
    "5,000 levels deep": "name: x\nvnodes: " + "[" * 5000 + "]" * 5000,
    "50,000 VNodes": micro_gpt(8400),
    "alias bomb": "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{n}: &{n} [{', '.join([f'*{p}'] * 10)}]\n" for n, p in zip("bcdefg", "abcdef")),
}
REPO = Path(__file__).resolve().parents[1]
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


async def stall_and_overhead(reps: int) -> list[dict]:
    jobs = NetworkJobs()
    await jobs.offloop.warm()

    async def inline():
        load_network(AT_THE_LIMIT)

    idle = statistics.median([await longest_stall(lambda: asyncio.sleep(0.1)) for _ in range(reps)])
    inline_stall = statistics.median([await longest_stall(inline) for _ in range(reps)])
    offloop_stall = statistics.median([await longest_stall(lambda: jobs.check(AT_THE_LIMIT)) for _ in range(reps)])
    small_inline = median_s(lambda: load_network(MICRO), reps)
    offloop_times = []
    for _ in range(reps):
        start = time.perf_counter()
        await jobs.check(MICRO)
        offloop_times.append(time.perf_counter() - start)
    return [
        {"name": "stall", "vnodes": NETWORK_VNODES - 3 - (NETWORK_VNODES - 3) % 6, "offloop_s": offloop_stall,
         "inline_s": inline_stall, "idle_s": idle, "ratio": offloop_stall / inline_stall},
        {"name": "overhead", "network": "micro-gpt", "offloop_s": statistics.median(offloop_times),
         "inline_s": small_inline, "ratio": statistics.median(offloop_times) / small_inline},
    ]


def refusals(reps: int) -> list[dict]:
    anchor = median_s(lambda: load_network(MICRO), reps)
    return [{"name": f"refuse {what}", "refuse_s": (s := median_s(lambda: refuse(text), reps)),
             "load_micro_gpt_s": anchor, "ratio": s / anchor}
            for what, text in OVER_THE_LIMITS.items()]


def main(args: argparse.Namespace) -> list[dict]:
    reps = 3 if args.quick else 11
    return [*asyncio.run(stall_and_overhead(reps)), *refusals(reps)]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", type=Path, default=REPO / "bench" / "results" / "offloop.json")
    args = parser.parse_args()
    rows = main(args)
    stall, overhead, *refused = rows
    print(f"stall    checking {stall['vnodes']} VNodes: event loop waits {stall['offloop_s'] * 1e3:.1f} ms off the loop, "
          f"{stall['inline_s'] * 1e3:.1f} ms inline ({stall['idle_s'] * 1e3:.1f} ms idle), ratio {stall['ratio']:.3f}")
    print(f"overhead micro-gpt check in a child process {overhead['offloop_s'] * 1e3:.1f} ms, inline "
          f"{overhead['inline_s'] * 1e3:.1f} ms, ratio {overhead['ratio']:.1f}")
    for row in refused:
        print(f"{row['name']:<26} {row['refuse_s'] * 1e3:.2f} ms, loading micro-gpt {row['load_micro_gpt_s'] * 1e3:.2f} ms, "
              f"ratio {row['ratio']:.2f}")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(rows, indent=1) + "\n")
