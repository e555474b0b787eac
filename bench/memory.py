"""Bytes per parameter a PNode holds, fp32 against 8-bit optimizer state, and what the 8-bit state costs the loss.

    python -m bench.memory [--quick] [--json PATH]

For tiny-gpt and seed-64heads (`--quick`: tiny-gpt, fewer steps) in bf16, each VNode but the loss
recomputing (`train_throughput.with_recompute`), one sequence a step, on one PNode of an embedded
cluster, with each optimizer state in turn (`STATES`: `fp32`, what a PNode held before, measured in the
same run; the 8-bit `int8` and `int8-sr`), `RUNS` sessions each (their median):
- bytes per parameter: the PNode's peak RSS (Linux's VmHWM) less what its process held before hosting
  anything (`Heartbeat.process_bytes`: after its warm-up step of a micro network, `pnode.warm_up`, which
  pays what any process's first step sets up, 50-55 MiB here), over the network's parameters, against
  the issue's bound of 10 bytes per bf16 parameter: target <= 1 for `int8-sr`, the setting made for it
  (fp32 holds 20 per parameter besides activations, `memory_model.STATE_BYTES`; int8 keeps an exact
  master, 2 bytes more);
- the validation loss after the run (300 steps; `--quick` 60) with each 8-bit state over the fp32
  state's, from the same seed: target <= 1.01.
Each row carries the issue's fields (network, optimizer_state, bytes_per_param, peak_rss_mib, params,
val_loss_ratio_vs_fp32_adam) and every run's figure.
Small networks carry what does not grow with their parameters: on tiny-gpt about 14 MiB that a first step at
a network's own shapes leaves with torch's bf16 matmuls (oneDNN), 3.5 bytes a parameter there;
bench/llama1b.py measures a 1B network.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
from pathlib import Path

from computeall.cli.embedded import running_cluster
from computeall.cli.session_view import session_events
from computeall.network import Graph, load_network
from computeall.protocol.config import DataConfig, LrSchedule, OptimizerConfig, SessionConfig
from computeall.protocol.events import ValidationCompleted

from .common import REPO, Bench, at_most
from .sessions import corpus, run_to_end, wait_for_pnodes
from .train_throughput import with_recompute

NETWORKS = REPO / "examples" / "networks"
# fp32: the anchor; int8: 8-bit moments, the exact master as its low half; int8-sr: no master, stochastic rounding
STATES = ("fp32", "int8", "int8-sr")
LEAN = "int8-sr"  # the setting that is to hold a bf16 parameter in at most BOUND bytes
BOUND = 10.0
# Sessions per network and state. A small network's figure moves from run to run by about a MiB of heap,
# 0.25 bytes a parameter on tiny-gpt (9.4-10.3 in six runs of one code), 0.04 on seed-64heads.
RUNS = {"tiny-gpt": 3, "seed-64heads": 1}


async def measure(network_yaml: str, state: str, steps: int) -> tuple[int, int, float]:
    """(peak RSS above the process's own, the process's own, the final validation loss) of one session."""
    config = SessionConfig(
        network_yaml=network_yaml, data=DataConfig(files=corpus()), steps=steps, batch_size=1, precision="bf16",
        optimizer=OptimizerConfig(state=state), lr=LrSchedule(peak=1e-3, warmup_steps=10, min_lr=1e-4),
        validate_every=steps, validation_batches=8, update_ratio_every=0,
    )
    with tempfile.TemporaryDirectory() as tmp:
        async with running_cluster(Path(tmp), 1) as (client, supervisor):
            beats = await wait_for_pnodes(supervisor, ["pnode-0"])
            sid = await run_to_end(client, config)
            peak = supervisor.peak_rss_bytes("pnode-0")
            events = await session_events(client, sid)
    if peak is None:
        raise SystemExit("this kernel does not report a process's peak RSS (VmHWM)")
    process = beats["pnode-0"].process_bytes
    loss = [e.payload.loss for _, e in events if isinstance(e.payload, ValidationCompleted)][-1]
    return peak - process, process, loss


def main() -> int:
    bench = Bench("memory", __doc__)
    args = bench.parse()
    runs = {"tiny-gpt": 1} if args.quick else RUNS
    steps = 60 if args.quick else 300
    for name, times in runs.items():
        network_yaml = with_recompute((NETWORKS / f"{name}.yaml").read_text())
        graph = Graph(load_network(network_yaml))
        params = sum(graph.param_count(v) for v in graph.order)
        held: dict[str, list[float]] = {}
        peaks: dict[str, list[float]] = {}
        losses: dict[str, float] = {}
        for _ in range(times):  # the states in turn, as the machine's speed and load drift
            for state in STATES:
                extra, process, losses[state] = asyncio.run(measure(network_yaml, state, steps))
                held.setdefault(state, []).append(extra / params)
                peaks.setdefault(state, []).append((extra + process) / 2**20)
                print(f"  {name} {state}: peak RSS {(extra + process) / 2**20:.0f} MiB, the process's own "
                      f"{process / 2**20:.0f} MiB, {params / 1e6:.1f} M parameters: {extra / params:.2f} bytes per "
                      f"parameter, validation loss {losses[state]:.4f}", flush=True)
        for state in STATES:
            per_param = statistics.median(held[state])
            fields = dict(network=name, optimizer_state=state, bytes_per_param=per_param, params=params, runs=times,
                          peak_rss_mib=statistics.median(peaks[state]), bytes_per_param_runs=str(held[state]),
                          val_loss=losses[state], val_loss_ratio_vs_fp32_adam=losses[state] / losses["fp32"])
            bench.row(f"{name} bf16, optimizer.state {state}: bytes per parameter (peak RSS less the process's own; "
                      f"median of {times})", "bytes/parameter", per_param, "the issue's bound", BOUND,
                      at_most(1.0) if state == LEAN else None, **fields)
            if state != "fp32":
                bench.row(f"{name} bf16: validation loss after {steps} steps with optimizer.state {state}",
                          "loss", losses[state], "the same with fp32 Adam state", losses["fp32"], at_most(1.01))
    return bench.finish()


if __name__ == "__main__":
    raise SystemExit(main())
