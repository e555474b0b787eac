"""Tokens per second over shaped links (the WAN lab), per (profile, system), against the plain torch loop.

Every system trains the tiny-gpt shape, batch 8x256, 4 micro-batches, two processes of one thread
each, each in its own network namespace behind a link of the profile (bench/wanlab, docs/wan-lab.md).
The anchor is the plain single-process torch loop, two threads, no network, measured in the same run.

    python bench/wan.py [--quick] [--json PATH]

A system is one function registered in SYSTEMS: (lab, steps) -> seconds per step (median).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.wanlab import PROFILES, LabUnavailable, WanLab  # noqa: E402
from bench.wanlab.netns import check_available  # noqa: E402
from bench.wanlab.torch_peers import pipeline, plain  # noqa: E402

BATCH, CONTEXT = 8, 256
System = Callable[[WanLab, int, int], float]
SYSTEMS: dict[str, System] = {}


def system(name: str) -> Callable[[System], System]:
    def register(fn: System) -> System:
        SYSTEMS[name] = fn
        return fn
    return register


def _median_after_warmup(step_s: list[float], warmup: int) -> float:
    return statistics.median(step_s[warmup:])


@system("torch-gpipe")
def torch_gpipe(lab: WanLab, steps: int, warmup: int) -> float:
    ranks = pipeline(lab, "gpipe", steps + warmup, BATCH)
    return max(_median_after_warmup(r["step_s"], warmup) for r in ranks)


@system("torch-1f1b")
def torch_1f1b(lab: WanLab, steps: int, warmup: int) -> float:
    ranks = pipeline(lab, "1f1b", steps + warmup, BATCH)
    return max(_median_after_warmup(r["step_s"], warmup) for r in ranks)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer steps, loopback and city only")
    parser.add_argument("--json", type=Path, default=REPO / "bench" / "results" / "wan.json")
    parser.add_argument("--profiles", nargs="*", choices=sorted(PROFILES), help="default: all (quick: loopback city)")
    parser.add_argument("--systems", nargs="*", choices=sorted(SYSTEMS), help="default: all")
    args = parser.parse_args()
    try:
        check_available()
    except LabUnavailable as e:
        print(f"skipped: {e}")
        return 0
    steps, warmup = (2, 1) if args.quick else (6, 2)
    profiles = args.profiles or (["loopback", "city"] if args.quick else list(PROFILES))
    tokens_per_step = BATCH * CONTEXT

    anchor = plain(steps + warmup, BATCH)
    plain_tps = tokens_per_step / _median_after_warmup(anchor["step_s"], warmup)
    rows = []
    for name in profiles:
        for sys_name in args.systems or SYSTEMS:
            with WanLab(name, nodes=2, peers=True) as lab:
                step_s = SYSTEMS[sys_name](lab, steps, warmup)
            link = PROFILES[name]
            rows.append({"profile": name, "system": sys_name, "rate_mbit": link.rate_mbit,
                         "one_way_delay_ms": link.delay_ms, "median_step_s": step_s,
                         "tokens_per_s": tokens_per_step / step_s, "ratio_vs_plain": tokens_per_step / step_s / plain_tps,
                         "plain_tokens_per_s": plain_tps, "steps": steps})
            print(f"{name:<10}{sys_name:<14}{rows[-1]['tokens_per_s']:>9.0f} tokens/s  {step_s:6.2f} s/step"
                  f"  ratio vs plain {rows[-1]['ratio_vs_plain']:.2f}", flush=True)
    print(f"plain torch, 1 process, 2 threads: {plain_tps:.0f} tokens/s")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
