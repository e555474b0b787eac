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

    python bench/replicas.py [--quick] [--batch 8,32,128] [--json PATH] [--no-lab]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # bench.wanlab
sys.path.insert(0, str(REPO / "tests"))  # the integration tests' cluster helpers

from computeall.cli.data_upload import with_sent_data  # noqa: E402
from computeall.cli.follow import follow_session, start_session  # noqa: E402
from computeall.cli.session_view import session_events  # noqa: E402
from computeall.cli.supervisor import ServiceSpec  # noqa: E402
from computeall.protocol.config import DataConfig, SessionConfig  # noqa: E402
from computeall.protocol.events import StepCompleted  # noqa: E402
from computeall.protocol.replica_sync import ReplicaSync  # noqa: E402
from bench.wanlab.replica_runs import lab_rows, pooled  # noqa: E402
from integration.cluster import running_cluster, wait_for_pnodes  # noqa: E402

RESULTS = REPO / "bench" / "results"
NETWORK = REPO / "examples" / "networks" / "tiny-gpt.yaml"
SHAKESPEARE = next((p / "shared" / "data" / "tinyshakespeare.txt" for p in REPO.parents
                    if (p / "shared" / "data" / "tinyshakespeare.txt").exists()), None)


def corpus() -> list[str]:
    if SHAKESPEARE is not None:
        return [str(SHAKESPEARE)]
    from computeall.cli.default_corpus import stdlib_files

    return stdlib_files(1 << 20)


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
    config = await with_sent_data(client, config, progress=False)  # uploaded once, then found
    sid, command_id = await start_session(client, config)
    outcome = await follow_session(client, sid, config.steps, None, False, command_id)
    if not outcome.ok:
        raise SystemExit(outcome.message)
    done = [e.payload for _, e in await session_events(client, sid) if isinstance(e.payload, StepCompleted)]
    measured = done[warmup:]
    step_s = statistics.median(p.step_time_s for p in measured)
    return {"batch": batch, "replicas": replicas, "sync": sync.mode, "inner_steps": sync.inner_steps if sync.mode == "diloco" else None,
            "step_times_s": [p.step_time_s for p in measured], "median_step_s": step_s,
            "tokens_per_s": measured[0].tokens / step_s,
            "median_compute_s_per_pnode": statistics.median(p.compute_s for p in measured) / replicas,
            "reduce_bytes_per_step": statistics.mean(p.reduce_bytes for p in measured),
            "final_loss": done[-1].loss}


async def bench(steps: int, warmup: int, batch: int, inner_steps: int, rounds: int) -> list[dict]:
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
    one, two, dl = ({**pooled(runs[k]), "median_compute_s_per_pnode": statistics.median(
        r["median_compute_s_per_pnode"] for r in runs[k])} for k in ("one", "two", "diloco"))
    return [
        {"name": f"batch {batch}: R=1, 1 PNode on 1 core (anchor)", **one, "ratio": 1.0},
        {"name": f"batch {batch}: R=2, 1 PNode per replica", **two,
         "ratio": two["tokens_per_s"] / (2 * one["tokens_per_s"]), "ratio_is": "scaling: tokens/s / (2 x R=1)"},
        {"name": f"batch {batch}: R=2 diloco H={inner_steps}", **dl,
         "ratio": dl["tokens_per_s"] / two["tokens_per_s"], "ratio_is": "tokens/s / R=2 summed gradients",
         "bytes_ratio": dl["reduce_bytes_per_step"] / two["reduce_bytes_per_step"]},
    ]


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer steps")
    parser.add_argument("--json", type=Path, default=RESULTS / "replicas.json")
    parser.add_argument("--no-lab", action="store_true", help="loopback only")
    parser.add_argument("--batch", type=batch_sizes, default="8,32,128",
                        help=f"comma-separated batch sizes, multiples of {2 * MICRO_BATCH}")
    args = parser.parse_args()
    steps, warmup, inner, rounds = (8, 2, 4, 1) if args.quick else (16, 2, 8, 3)
    result: dict = {"loopback": [], "lab": []}
    for batch in args.batch:
        rows = asyncio.run(bench(steps, warmup, batch, inner, rounds))
        print(f"{NETWORK.name}, batch {batch} in {batch // MICRO_BATCH} micro-batches, loopback, "
              f"{os.cpu_count()} cores, medians of {rounds} x {steps} steps")
        show(rows)
        result["loopback"] += rows
    for batch in ([] if args.no_lab else args.batch):
        lab_steps, lab_warmup = 2 * inner, (1 if args.quick else 2)
        lab = lab_rows(base_config(lab_steps, batch), lab_steps, lab_warmup, inner, rounds)
        if isinstance(lab, str):
            print(f"WAN lab skipped: {lab}")
            result["lab_skipped"] = lab
            break
        print(f"WAN lab, batch {batch}, one PNode per node on its own core, means of {lab_steps} steps "
              f"({rounds} x for lan)")
        show(lab)
        result["lab"] += lab
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=1) + "\n")


def show(rows: list[dict]) -> None:
    print(f"{'run':<48}{'tokens/s':>10}{'step':>9}{'sent/step':>12}{'ratio':>8}")
    for r in rows:
        step_s = r.get("median_step_s", r.get("mean_step_s"))
        print(f"{r['name']:<48}{r['tokens_per_s']:>10.0f}{step_s:>8.3f}s"
              f"{r['reduce_bytes_per_step'] / 2**20:>9.2f} MiB{r['ratio']:>8.3f}  {r.get('ratio_is', '')}")
        if "bytes_ratio" in r:
            print(f"  diloco sends {r['bytes_ratio']:.3f} of summed gradients' bytes per step")


if __name__ == "__main__":
    main()
