"""The pipeline: what wire compression costs in loss and saves in bytes, what 1F1B saves in memory,
and how close 1 and 2 PNodes come to a plain torch loop.

    python -m bench.pipeline [--quick] [--json PATH] [--figures wire memory speed]

Every figure is a ratio against an anchor measured in the same run:
- wire: tiny-gpt on tiny-shakespeare, batch 8x256 in 4 micro-batches, 2 PNodes; the loss after
  200 steps (mean of the last 10) and the bytes sent PNode to PNode per step, for `wire: bf16`,
  `fp16` and `int8`, each divided by `wire: fp32`'s (the sessions run side by side on one cluster;
  placement and timing never change their math).
- memory: peak RSS of each PNode process (VmHWM) with 16 micro-batches (batch 64x256, 2 PNodes),
  1f1b (default bound, and 3 in flight) / gpipe, a fresh cluster per schedule; and the same for
  the memory above the floor of one micro-batch in flight (what the schedule decides).
- speed: tokens/s of 1 PNode (1 and 2 threads) and of 2 PNodes (1 thread each, 4 micro-batches,
  each schedule) / the plain single-process loop of the same shape written with torch's own modules
  (computeall.tensorcore.plain_gpt) on as many threads, measured before and after every run (median of
  all). A step's time is the wall time between two recorded steps: orchestration included.

--quick: micro-gpt for the wire runs (30 steps), fewer steps elsewhere.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from computeall.cli.data_upload import with_sent_data
from computeall.cli.embedded import running_cluster
from computeall.cli.follow import follow_session, start_session
from computeall.cli.session_view import session_events
from computeall.protocol.config import DataConfig, LrSchedule, PipelineConfig, SessionConfig
from computeall.protocol.events import StepCompleted
from computeall.protocol.fair_share import FairShareLimits

from .common import REPO, Bench, at_most
from .sessions import recorded_steps, shakespeare
from .wanlab.torch_peers import plain

NETWORKS = REPO / "examples" / "networks"


def corpus() -> list[str]:
    return [str(shakespeare())]


def session(network: str, steps: int, batch: int, micro: int, **extra) -> SessionConfig:
    """A pipeline over `min_pnodes` PNodes, one stage each: the figures are of that pipeline."""
    pnodes = extra.pop("min_pnodes", 1)
    pipeline = extra.pop("pipeline", PipelineConfig()).model_copy(update={"stages": pnodes})
    return SessionConfig(
        network_yaml=(NETWORKS / network).read_text(), data=DataConfig(files=corpus()), steps=steps,
        batch_size=batch, micro_batches=micro, seed=1, lr=LrSchedule(peak=3e-3, warmup_steps=10, min_lr=3e-4),
        min_pnodes=pnodes, pipeline=pipeline, **extra,
    )


@dataclass
class Step:
    wall_s: float  # since the previous step was recorded: everything a step costs, orchestration included
    done: StepCompleted


async def run_sessions(client, configs: list[SessionConfig]) -> list[list[Step]]:
    """Run the sessions side by side to their end; each one's steps (from the second on). The corpus
    is uploaded first (once: the parts are content-addressed), as `computeall run` does."""
    configs = [await with_sent_data(client, c, progress=False) for c in configs]

    async def one(config: SessionConfig) -> list[Step]:
        sid, command = await start_session(client, config)
        outcome = await follow_session(client, sid, config.steps, progress=False, command_id=command)
        if not outcome.ok:
            raise RuntimeError(outcome.message)
        steps = recorded_steps(await session_events(client, sid))
        return [Step(b.ts - a.ts, b.payload) for a, b in zip(steps, steps[1:])]

    return list(await asyncio.gather(*(one(c) for c in configs)))


def peak_rss(supervisor, pnodes: int) -> list[int]:
    """Each PNode process's peak resident memory so far (VmHWM), in bytes."""
    out = []
    for i in range(pnodes):
        status = Path(f"/proc/{supervisor.services[f'pnode-{i}'].process.pid}/status").read_text()
        kib = next(line.split()[1] for line in status.splitlines() if line.startswith("VmHWM:"))
        out.append(int(kib) * 1024)
    return out


async def on_cluster(pnodes: int, configs: list[SessionConfig], processes_on_machine: int | None = None):
    with tempfile.TemporaryDirectory(prefix="bench-pipeline-") as tmp:
        side_by_side = FairShareLimits(max_running_sessions_per_user=len(configs))  # none of them queued
        async with running_cluster(Path(tmp), pnodes, processes_on_machine=processes_on_machine,
                                   limits=side_by_side) as (client, sup):
            steps = await run_sessions(client, configs)
            return steps, peak_rss(sup, pnodes)


# -- the three figures --------------------------------------------------------------------------------
# what a wire format may cost in loss (DESIGN: within 2-3% of uncompressed) and must save in bytes
WIRE_TARGETS = {"bf16": (at_most(1.03), at_most(0.51)), "fp16": (at_most(1.03), at_most(0.51)),
                "int8": (at_most(1.03), at_most(0.26))}


def wire_rows(bench: Bench, quick: bool) -> None:
    network, steps = ("micro-gpt.yaml", 30) if quick else ("tiny-gpt.yaml", 200)
    wires = ["fp32", *WIRE_TARGETS]
    configs = [session(network, steps, 8, 4, wire=w, min_pnodes=2) for w in wires]
    runs, _ = asyncio.run(on_cluster(2, configs))
    tail = {w: statistics.fmean(s.done.loss for s in run[-10:]) for w, run in zip(wires, runs)}
    sent = {w: statistics.median(s.done.wire_bytes for s in run) for w, run in zip(wires, runs)}
    for w, (loss, sent_bytes) in WIRE_TARGETS.items():
        name = f"{Path(network).stem}, 2 PNodes, wire {w}"
        bench.row(f"{name}: loss after {steps} steps (last 10)", "loss", tail[w], "wire fp32", tail["fp32"], loss)
        bench.row(f"{name}: sent PNode to PNode per step", "bytes", sent[w], "wire fp32", sent["fp32"], sent_bytes)


def memory_rows(bench: Bench, quick: bool) -> None:
    """Peak RSS per PNode, and the part of it above a floor (imports, weights, optimizer state, one
    micro-batch: the run holding one micro-batch at a time) that the schedule decides."""
    batch, steps = (32, 2) if quick else (64, 3)
    schedules = {"gpipe": PipelineConfig(schedule="gpipe"), "1f1b": PipelineConfig(),
                 "1f1b, in_flight 3": PipelineConfig(in_flight=3),  # 3: one per segment of the 2-PNode ring
                 "1f1b, in_flight 1": PipelineConfig(in_flight=1)}  # the floor
    peaks = {}
    for name, pipeline in schedules.items():
        config = session("tiny-gpt.yaml", steps, batch, 16, pipeline=pipeline, min_pnodes=2)
        _, peaks[name] = asyncio.run(on_cluster(2, [config]))
    floor = peaks["1f1b, in_flight 1"]
    for name in [n for n in schedules if n != "gpipe"]:
        for i in range(2):
            at = f"tiny-gpt, batch {batch} in 16 micro-batches, pnode-{i}, {name}"
            bench.row(f"{at}: peak RSS", "bytes", peaks[name][i], "gpipe", peaks["gpipe"][i])
            if name != "1f1b, in_flight 1":
                bench.row(f"{at}: peak RSS above one micro-batch in flight", "bytes", peaks[name][i] - floor[i], "gpipe",
                          peaks["gpipe"][i] - floor[i])


SPEED_RUNS = [  # (name, PNodes, threads per PNode, micro-batches, schedule); each against the plain loop on as many threads
    ("1 PNode, 1 thread", 1, 1, 1, "1f1b"),
    ("1 PNode, 2 threads", 1, 2, 1, "1f1b"),
    ("2 PNodes, 1 thread each, 1f1b", 2, 1, 4, "1f1b"),
    ("2 PNodes, 1 thread each, gpipe", 2, 1, 4, "gpipe"),
]


def speed_rows(bench: Bench, quick: bool) -> None:
    steps, warmup, batch = (6, 2, 8) if quick else (16, 3, 8)
    tokens_per_step = batch * 256
    cores = os.cpu_count() or 1
    anchors: dict[int, list[float]] = {1: [], 2: []}

    def measure_anchors() -> None:  # the machine drifts: the anchors are measured around every run
        for threads in anchors:
            anchors[threads] += plain(steps + warmup, batch, threads=threads)["step_s"][warmup:]

    measure_anchors()
    runs = {}
    for name, pnodes, threads, micro, schedule in SPEED_RUNS:
        config = session("tiny-gpt.yaml", steps + warmup, batch, micro, pipeline=PipelineConfig(schedule=schedule),
                         min_pnodes=pnodes)
        (run,), _ = asyncio.run(on_cluster(pnodes, [config], processes_on_machine=max(1, cores // threads)))
        runs[name] = (pnodes * threads, run[warmup - 1:])  # `run` starts at the second step
        measure_anchors()
    anchor_tps = {threads: tokens_per_step / statistics.median(times) for threads, times in anchors.items()}
    for name, (threads, run) in runs.items():
        compute = statistics.median(s.done.compute_s for s in run)
        wall = statistics.median(s.wall_s for s in run)
        print(f"  {name}: {wall:.2f} s a step, {compute:.2f} s of it computing (median)")
        bench.row(f"tiny-gpt, batch {batch} x 256, {name}", "tokens/s", tokens_per_step / wall,
                  f"plain torch loop, {threads} thread(s)", anchor_tps[threads])


FIGURES = {"wire": wire_rows, "memory": memory_rows, "speed": speed_rows}


def main() -> int:
    bench = Bench("pipeline", __doc__, quick_help="micro-gpt wire runs, fewer steps")
    bench.parser.add_argument("--figures", nargs="*", choices=list(FIGURES), default=list(FIGURES))
    args = bench.parse()
    for name in args.figures:
        FIGURES[name](bench, args.quick)
    return bench.finish()


if __name__ == "__main__":
    sys.exit(main())
