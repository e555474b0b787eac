"""Data-parallel replicas: tokens/s with R = 1 and R = 2, one PNode per replica on its own core.

The anchor is R = 1 on one PNode pinned to one core, measured in the same run, interleaved with
the R = 2 runs on the same cluster: the scaling ratio is tokens/s(R=2) / (2 x tokens/s(R=1)),
target >= 0.9. Also: the bytes the replicas send each other per step (summed gradients), and
diloco against summed gradients (bytes per step and tokens/s). Then the same over shaped links
in the WAN lab when this machine can run it (root: `bench/wanlab/replica_runs.py`): the scaling
at the `lan` profile, and diloco against summed gradients at `home`.

A step's batch is dealt in micro-batches of 4 sequences of 256 tokens; R=2 runs half of them on
each replica. The summed gradients' bytes per step are fixed by the parameters (32 MiB for
tiny-gpt) while the compute grows with the batch, so the scaling is quoted per batch: `--batch 8`
(2 micro-batches, one per replica) is the smallest step that feeds both replicas, 32 a small
global batch, 128 (32k tokens a step) one where a data-parallel run usually stands: a trainer
accumulates more before each sum as it adds replicas (docs/decisions.md).

A step's time is the wall time from one recorded step to the next (`bench.sessions.step_walls`).

    python -m bench.replicas [--quick] [--batch 8,32,128] [--json PATH] [--no-lab]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import sys
import tempfile
from pathlib import Path

from computeall.cli.embedded import running_cluster
from computeall.cli.session_view import session_events
from computeall.cli.supervisor import ServiceSpec
from computeall.protocol.config import DataConfig, SessionConfig
from computeall.protocol.replica_sync import ReplicaSync

from .common import REPO, Bench, at_least
from .compression_rows.pseudo_grads import SPARSE
from .sessions import corpus, recorded_steps, run_to_end, step_walls, wait_for_pnodes
from .wanlab.replica_runs import lab_rows, pooled

NETWORK = REPO / "examples" / "networks" / "tiny-gpt.yaml"
SCALING = at_least(0.9)  # R = 2 replicas give at least 0.9 of twice R = 1's tokens/s


def pin(pid: int, core: int) -> None:
    """Every thread of the process onto one core (threads it starts later inherit it)."""
    for tid in os.listdir(f"/proc/{pid}/task"):
        os.sched_setaffinity(int(tid), {core})


async def add_pnode(client, supervisor, name: str, core: int) -> None:
    cores = os.cpu_count() or 1
    supervisor.start([ServiceSpec(name, "pnode", ["--name", name, "--processes-on-machine", str(cores)])])
    await wait_for_pnodes(supervisor, [name])
    pin(supervisor.services[name].process.pid, core % cores)


MICRO_BATCH = 4  # sequences per micro-batch


def base_config(steps: int, batch: int) -> SessionConfig:
    return SessionConfig(network_yaml=NETWORK.read_text(), data=DataConfig(files=corpus()), steps=steps,
                         batch_size=batch, micro_batches=batch // MICRO_BATCH, seed=1)


async def measure(client, steps: int, warmup: int, batch: int, replicas: int, sync: ReplicaSync) -> dict:
    config = base_config(steps + warmup, batch).model_copy(update={"replicas": replicas, "sync": sync})
    sid = await run_to_end(client, config)  # the corpus is uploaded once, then found
    events = await session_events(client, sid)
    done = [e.payload for e in recorded_steps(events)]
    measured = done[warmup:]
    walls = step_walls(events)[warmup - 1:]  # interval i ends with step i + 1's record
    step_s = statistics.median(walls)
    return {"batch": batch, "replicas": replicas, "sync": sync.mode, "inner_steps": sync.inner_steps if sync.mode == "diloco" else None,
            "step_times_s": walls, "median_step_s": step_s,
            "tokens_per_s": measured[0].tokens / step_s,
            "median_compute_s_per_pnode": statistics.median(p.compute_s for p in measured) / replicas,
            "reduce_bytes_per_step": statistics.mean(p.reduce_bytes for p in measured),
            "final_loss": done[-1].loss}


async def bench_runs(steps: int, warmup: int, batch: int, inner_steps: int, rounds: int) -> tuple[dict, dict, dict]:
    """`rounds` of: R=1 on pnode-0 alone; pnode-1 joins; R=2 summed gradients; R=2 diloco; pnode-1 leaves.
    The machine is shared and noisy: interleaving the runs exposes each to the same drift."""
    runs: dict[str, list[dict]] = {"one": [], "two": [], "diloco": []}
    diloco = ReplicaSync(mode="diloco", inner_steps=inner_steps)
    with tempfile.TemporaryDirectory(prefix="bench-replicas-") as tmp:
        async with running_cluster(Path(tmp), pnodes=0) as (client, supervisor):
            await add_pnode(client, supervisor, "pnode-0", core=0)
            for r in range(rounds):
                runs["one"].append(await measure(client, steps, warmup, batch, 1, ReplicaSync()))
                await add_pnode(client, supervisor, f"pnode-{r + 1}", core=1)
                runs["two"].append(await measure(client, steps, warmup, batch, 2, ReplicaSync()))
                runs["diloco"].append(await measure(client, steps, warmup, batch, 2, diloco))
                leaving = supervisor.services.pop(f"pnode-{r + 1}").process
                leaving.send_signal(signal.SIGTERM)  # a graceful leave: it says so in its heartbeats, then exits
                await asyncio.get_running_loop().run_in_executor(None, leaving.wait, 60)
    for name, measured in runs.items():
        print(f"  batch {batch}, {name}: compute {statistics.median(r['median_compute_s_per_pnode'] for r in measured):.3f} s "
              f"a step per PNode (median)")
    one, two, dl = (pooled(runs[k]) for k in ("one", "two", "diloco"))
    return one, two, dl


def batch_sizes(text: str) -> list[int]:
    """`--batch 8,32,128`: sizes that split into micro-batches of MICRO_BATCH for 2 replicas."""
    try:
        sizes = [int(b) for b in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of whole numbers") from None
    if not sizes or any(b <= 0 or b % (2 * MICRO_BATCH) for b in sizes):
        raise argparse.ArgumentTypeError(f"{text}: each batch must split into micro-batches of {MICRO_BATCH} "
                                         f"for 2 replicas (a positive multiple of {2 * MICRO_BATCH})")
    return sizes


def report(bench: Bench, batch: int, where: str, one: dict, two: dict, summed: dict, diloco: dict, inner: int) -> None:
    name = f"tiny-gpt, batch {batch} in {batch // MICRO_BATCH} micro-batches, {where}"
    bench.row(f"{name}: R=2, one PNode per replica", "tokens/s", two["tokens_per_s"], "2 x R=1 on one PNode",
              2 * one["tokens_per_s"], SCALING if where == "loopback" else None)
    bench.row(f"{name}: R=2 diloco H={inner}", "tokens/s", diloco["tokens_per_s"], "R=2 summing gradients",
              summed["tokens_per_s"])
    bench.row(f"{name}: R=2 diloco H={inner}", "bytes sent/step", diloco["reduce_bytes_per_step"],
              "R=2 summing gradients", summed["reduce_bytes_per_step"])


def main() -> int:
    bench = Bench("replicas", __doc__, quick_help="fewer steps")
    bench.parser.add_argument("--no-lab", action="store_true", help="loopback only")
    bench.parser.add_argument("--batch", type=batch_sizes, default="8,32,128",
                              help=f"comma-separated batch sizes, multiples of {2 * MICRO_BATCH}")
    args = bench.parse()
    steps, warmup, inner, rounds = (8, 2, 4, 1) if args.quick else (16, 2, 8, 3)
    for batch in args.batch:
        one, two, dl = asyncio.run(bench_runs(steps, warmup, batch, inner, rounds))
        report(bench, batch, f"loopback, medians of {rounds} x {steps} steps", one, two, two, dl, inner)
    for batch in ([] if args.no_lab else args.batch):
        lab_steps, lab_warmup = 2 * inner, (1 if args.quick else 2)
        lab = lab_rows(base_config(lab_steps, batch), lab_steps, lab_warmup, inner, rounds)
        if isinstance(lab, str):
            print(f"WAN lab skipped: {lab}")
            break
        one, two, summed, diloco, near, far = lab
        report(bench, batch, "WAN lab (lan: scaling, home: diloco)", one, two, summed, diloco, inner)
        sparse = f"tiny-gpt, batch {batch} in {batch // MICRO_BATCH} micro-batches, WAN lab: R=2 sparse diloco " \
                 f"H={SPARSE.inner_steps}, overlapped {SPARSE.overlap_steps}, means of {rounds} x {lab_steps} steps"
        bench.row(f"{sparse}, home", "tokens/s", far["tokens_per_s"], "the same at loopback", near["tokens_per_s"],
                  at_least(0.95))
        bench.row(f"{sparse}, home", "bytes sent/step", far["reduce_bytes_per_step"], "home: R=2 summing gradients",
                  summed["reduce_bytes_per_step"])
    return bench.finish()


if __name__ == "__main__":
    sys.exit(main())
