"""Tokens per second over shaped links (the WAN lab), per (profile, system), against the plain torch loop.

Every system trains the tiny-gpt shape, batch 32x256 in 8 micro-batches (`--batch 8`: 4 micro-batches),
two processes of one thread each, each in its own network namespace behind a link of the profile
(bench/wanlab, docs/wan-lab.md).
The anchor is the plain single-process torch loop, two threads, no network, measured in the same run.
computeall runs a whole session (NATS and its services in the root namespace, one PNode per
namespace); its step time is the time from one recorded step to the next, every overhead included.
computeall runs once per `--wires` setting (default fp32 and int8, the smallest wire whose loss
holds: docs/decisions.md); the torch peers send fp32. `computeall-bottleneck` trains tiny-gpt-wan
(a learned rank-24 bottleneck where the two PNodes cut it, int8 on its narrow edge: the compressed
configuration). Each computeall row over a shaped link has a twin against the same system and
wire on loopback in the same run (`ratio_vs_loopback`; targets at batch 32 for the compressed
configuration: city >= 0.9, home >= 0.75).

    python -m bench.wan [--quick] [--json PATH] [--profiles ...] [--systems ...] [--wires ...]

Where network namespaces cannot be made (no root), it writes no rows and says why.

A system is one function registered in SYSTEMS: (lab, Run) -> Measured.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from computeall.cli.default_corpus import stdlib_files
from computeall.cli.embedded import running_cluster
from computeall.protocol.config import DataConfig, LrSchedule, SessionConfig
from computeall.protocol.wire import Wire

from .common import Bench, at_least
from .wanlab import PROFILES, LabUnavailable, WanLab
from .wanlab.computeall_run import run_session
from .wanlab.netns import check_available
from .wanlab.torch_peers import NETWORK, pipeline, plain

CONTEXT = 256
MICRO_BATCHES = {8: 4, 32: 8}  # batch -> micro-batches in flight
WIRES: tuple[Wire, ...] = ("fp32", "int8")
COMPRESSED = "computeall-bottleneck"
# the compressed configuration over a shaped link against itself on loopback, at batch 32
LOOPBACK_TARGETS = {"city": at_least(0.9), "home": at_least(0.75)}


@dataclass(frozen=True)
class Run:
    steps: int  # timed steps
    warmup: int  # steps before them, not timed
    batch: int
    wire: Wire = "fp32"  # computeall's wire format on every edge (the torch peers always send fp32)

    @property
    def micro_batches(self) -> int:
        return MICRO_BATCHES[self.batch]


@dataclass
class Measured:
    samples: list[float]  # seconds of each step after the warmup
    extra: dict = field(default_factory=dict)  # what else a system reports (computeall: wire, bytes, bubble)

    @property
    def step_s(self) -> float:
        return statistics.median(self.samples)


System = Callable[[WanLab, Run], Measured]
SYSTEMS: dict[str, System] = {}


def system(name: str) -> Callable[[System], System]:
    def register(fn: System) -> System:
        SYSTEMS[name] = fn
        return fn
    return register


@system("computeall")
def computeall(lab: WanLab, run: Run) -> Measured:
    return _computeall(lab, run, NETWORK)


@system(COMPRESSED)
def computeall_bottleneck(lab: WanLab, run: Run) -> Measured:
    """tiny-gpt-wan: tiny-gpt with a learned rank-24 bottleneck where two PNodes cut it (int8 on its narrow
    edge whatever the session's wire; docs/decisions.md)."""
    return _computeall(lab, run, NETWORK.parent / "tiny-gpt-wan.yaml")


def _computeall(lab: WanLab, run: Run, network: Path) -> Measured:
    warmup = run.warmup
    config = SessionConfig(
        network_yaml=network.read_text(), data=DataConfig(files=stdlib_files(300_000)), steps=run.steps + warmup + 1,
        batch_size=run.batch, micro_batches=run.micro_batches, lr=LrSchedule(peak=3e-3, warmup_steps=2, min_lr=3e-4),
        wire=run.wire,
    )
    async def session(directory: Path):
        async with running_cluster(directory, pnodes=0) as cloud:  # NATS and the services, no PNodes
            return await run_session(cloud, lab, config)

    with tempfile.TemporaryDirectory(prefix="wan-computeall-") as directory:
        session_run = asyncio.run(session(Path(directory)))
    # interval i runs from step i's record to step i+1's: the first `warmup` are warmup
    intervals = session_run.step_intervals_s[warmup:]
    timed = [t for t in session_run.timings if t.step > warmup]
    counted = {t.step for t in timed}
    # PNode-seconds not spent computing, over all PNode-seconds of the steps: waiting for inputs,
    # for the others' backward, for the orchestrator's next request
    bubble = 1 - sum(t.compute_s for t in timed) / (len(lab.nodes) * sum(intervals))
    hosted = {p: sorted(v for v, q in session_run.assignment.items() if q == p) for p in sorted(set(session_run.assignment.values()))}
    return Measured(intervals, {
        "wire": run.wire, "bubble_share": bubble,
        "bytes_per_step": sum(sum(t.sent_bytes.values()) for t in timed) / max(1, len(counted)),
        "wait_share": sum(t.wait_s for t in timed) / max(1e-9, sum(t.step_s for t in timed)),
        "estimated_step_s": session_run.estimated_step_s, "hosted": hosted,
        "throughput": {p: t.model_dump() if t else None for p, t in session_run.throughput.items()},
    })


@system("torch-gpipe")
def torch_gpipe(lab: WanLab, run: Run) -> Measured:
    return _slowest_rank(pipeline(lab, "gpipe", run.steps + run.warmup, run.batch, run.micro_batches), run.warmup)


@system("torch-1f1b")
def torch_1f1b(lab: WanLab, run: Run) -> Measured:
    return _slowest_rank(pipeline(lab, "1f1b", run.steps + run.warmup, run.batch, run.micro_batches), run.warmup)


def _slowest_rank(ranks: list[dict], warmup: int) -> Measured:
    """A pipeline steps as fast as its slowest rank."""
    return Measured(max((r["step_s"][warmup:] for r in ranks), key=statistics.median))


def main() -> int:
    bench = Bench("wan", __doc__, quick_help="fewer steps, loopback and city only, batch 8")
    bench.parser.add_argument("--profiles", nargs="*", choices=sorted(PROFILES), help="default: all (quick: loopback city)")
    bench.parser.add_argument("--systems", nargs="*", choices=sorted(SYSTEMS), help="default: all")
    bench.parser.add_argument("--wires", nargs="*", choices=WIRES, default=list(WIRES), help="computeall's wire settings")
    bench.parser.add_argument("--batch", type=int, choices=sorted(MICRO_BATCHES), help="default 32 (quick: 8)")
    args = bench.parse()
    try:
        check_available()
    except LabUnavailable as e:
        print(f"skipped: {e}")
        return bench.finish()
    steps, warmup = (2, 1) if args.quick else (6, 2)
    batch = args.batch or (8 if args.quick else 32)
    profiles = args.profiles or (["loopback", "city"] if args.quick else list(PROFILES))
    runs = [(name, Run(steps, warmup, batch, wire)) for name in args.systems or SYSTEMS
            for wire in (args.wires if name == "computeall" else ["fp32"])]
    tokens_per_step = batch * CONTEXT
    print(f"batch {batch} x {CONTEXT} in {MICRO_BATCHES[batch]} micro-batches; every process 1 thread on "
          f"{os.cpu_count()} cores")
    on_loopback: dict[tuple[str, str], Measured] = {}
    for name in profiles:
        # the anchor before and after each profile, so a machine that got busier or quieter
        # meanwhile moves the anchor with the systems measured next to it
        anchor = plain(steps + warmup, batch)["step_s"][warmup:]
        measured = {}
        for sys_name, run in runs:
            with WanLab(name, nodes=2, peers=True) as lab:
                measured[(sys_name, run.wire)] = SYSTEMS[sys_name](lab, run)
            m = measured[(sys_name, run.wire)]
            print(f"{name:<10}{sys_name} wire {run.wire}: {m.step_s:6.2f} s/step {m.extra}", flush=True)
        anchor += plain(steps + warmup, batch)["step_s"][warmup:]
        if name == "loopback":
            on_loopback = measured
        link = PROFILES[name]
        shaped = f"{link.rate_mbit:g} Mbit/s, {link.delay_ms:g} ms" if link.rate_mbit else "unshaped"
        where = f"{name} ({shaped}), 2 nodes, batch {batch} x {CONTEXT}"
        plain_tokens = tokens_per_step / statistics.median(anchor)
        for (sys_name, wire), m in measured.items():
            ours = sys_name.startswith("computeall")
            fields = {"compression": _compression(sys_name, wire), "profile": name} if ours else {"profile": name}
            bench.row(f"{where}: {sys_name}, wire {wire}", "tokens/s", tokens_per_step / m.step_s,
                      "plain torch loop, 1 process, 2 threads, no network", plain_tokens, **fields)
            if not ours:
                continue
            for (peer, _), theirs in ((k, v) for k, v in measured.items() if not k[0].startswith("computeall")):
                bench.row(f"{where}: {sys_name}, wire {wire}", "tokens/s", tokens_per_step / m.step_s, peer,
                          tokens_per_step / theirs.step_s, **fields)
            twin = on_loopback.get((sys_name, wire))
            if name != "loopback" and twin is not None:
                bounded = sys_name == COMPRESSED and batch == 32
                bench.row(f"{where}: {sys_name}, wire {wire}, against loopback", "tokens/s", tokens_per_step / m.step_s,
                          f"{sys_name}, wire {wire}, on loopback", tokens_per_step / twin.step_s,
                          LOOPBACK_TARGETS.get(name) if bounded else None, ratio_vs_loopback=twin.step_s / m.step_s,
                          ratio_vs_plain=tokens_per_step / m.step_s / plain_tokens, **fields)
    return bench.finish()


def _compression(sys_name: str, wire: str) -> str:
    return "bottleneck rank 24, int8" if sys_name == COMPRESSED else f"wire {wire}"


if __name__ == "__main__":
    sys.exit(main())
