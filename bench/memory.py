"""Bytes per parameter a PNode holds, fp32 against 8-bit optimizer state, and what the 8-bit state costs the loss.

    python -m bench.memory [--quick] [--json PATH]

For tiny-gpt and seed-64heads (`--quick`: tiny-gpt, fewer steps) in bf16, each VNode but the loss
recomputing (`train_throughput.with_recompute`), one sequence a step, on one PNode of an embedded
cluster, once with `optimizer.state: fp32` (what a PNode held before: the anchor, measured in the same
run) and once with each 8-bit state (`int8`, `int8-sr`):
- bytes per parameter: the PNode's peak RSS (Linux's VmHWM) less what its process held before hosting
  anything (`Heartbeat.process_bytes`: after its warm-up step of a micro network, `pnode.warm_up`, which
  pays what any process's first step sets up, 50-55 MiB here), over the network's parameters. The int8 state's against the
  fp32 state's; the target, <= 0.5, is the issue's 10 bytes per bf16 parameter against the 20 the fp32
  state holds per parameter besides activations (`memory_model.STATE_BYTES`);
- the validation loss after the run (300 steps of tiny-gpt; `--quick` 60) with the int8 state over the
  fp32 state's, from the same seed: target <= 1.01.
Small networks carry what does not grow with their parameters: on tiny-gpt about 14 MiB that a first step at
a network's own shapes leaves with torch's bf16 matmuls (oneDNN), 3.5 bytes a parameter there;
bench/llama1b.py measures a 1B network.
"""

from __future__ import annotations

import asyncio
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
EIGHT_BIT = ("int8", "int8-sr")  # the exact master as its low half; no master, stochastic rounding


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
    names = ["tiny-gpt"] if args.quick else ["tiny-gpt", "seed-64heads"]
    steps = 60 if args.quick else 300
    for name in names:
        network_yaml = with_recompute((NETWORKS / f"{name}.yaml").read_text())
        graph = Graph(load_network(network_yaml))
        params = sum(graph.param_count(v) for v in graph.order)
        held, losses = {}, {}
        for state in ("fp32", *EIGHT_BIT):
            extra, process, losses[state] = asyncio.run(measure(network_yaml, state, steps))
            held[state] = extra / params
            print(f"  {name} {state}: peak RSS {(extra + process) / 2**20:.0f} MiB, the process's own "
                  f"{process / 2**20:.0f} MiB, {params / 1e6:.1f} M parameters: {held[state]:.2f} bytes per parameter, "
                  f"validation loss {losses[state]:.4f}", flush=True)
        for state in EIGHT_BIT:
            bench.row(f"{name} bf16, optimizer.state {state}: bytes per parameter (peak RSS less the process's own)",
                      "bytes/parameter", held[state], "the same with optimizer.state fp32", held["fp32"], at_most(0.5))
            bench.row(f"{name} bf16: validation loss after {steps} steps with optimizer.state {state}",
                      "loss", losses[state], "the same with fp32 Adam state", losses["fp32"], at_most(1.01))
    return bench.finish()


if __name__ == "__main__":
    raise SystemExit(main())
