"""A 1B-class Llama on four PNodes of 5 GiB each, against the same shape in plain torch.

    python -m bench.llama1b [--network PATH] [--pnodes 4] [--memory 5GiB] [--steps 2] [--recompute] [--json PATH]

The system: the network in bf16 with `optimizer.state: int8-sr` (`--optimizer-state`), on PNodes that each offer `--memory`
(the allocator must fit it in them), `--steps` steps (after one more to warm up) of 4 sequences in 4
micro-batches: seconds per step (wall time between recorded steps), each PNode's peak RSS (VmHWM),
and bytes per parameter: each PNode's peak RSS less its process's own (`Heartbeat.process_bytes`) over
the parameters it hosts, the largest of them.

The anchor, in the same run: the same shape as transformers' `LlamaForCausalLM` (fp32 weights, as a
practitioner starts) trained by torch's `AdamW(fused=True)` on 2 threads, in a process of its own: its
peak RSS less its baseline per parameter, and its tokens/s. When it cannot fit in this machine's memory
(its parameters, gradients and Adam state alone, 16 bytes each, against what the machine has), it is not
run and the row says so: that is the point of the system. The ratio is then against what it needs at
least: those 16 bytes, or, when the kernel killed it for memory, the memory that was free when it
started over its parameters (it held more than that when it was killed).

Targets: bytes per parameter <= 0.6 of the plain loop's; tokens/s >= 0.5 of it. The bound of a 4-stage
pipeline sharing 2 cores is printed with it: with M micro-batches over S stages at most M / (M + S - 1)
of the machine computes at once (4 / 7 here), before any cost of the bus.

`--network` defaults to examples/networks/llama-1b.yaml; any network whose blocks are attention and
swiglu_mlp VNodes with an embedding and a tied head runs (tests/unit/test_bench_llama1b.py runs tiny-gpt).
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import get_args

from computeall.cli.embedded import running_cluster
from computeall.cli.session_view import session_events
from computeall.network import Graph, load_network
from computeall.protocol.config import DataConfig, LrSchedule, OptimizerConfig, OptimizerState, SessionConfig
from computeall.protocol.events import Allocated

from .common import REPO, Bench, at_least, at_most
from .sessions import corpus, recorded_steps, run_to_end, step_walls, wait_for_pnodes
from .train_throughput import with_recompute

BATCH, MICRO_BATCHES, ANCHOR_THREADS = 4, 4, 2
PLAIN_BYTES_PER_PARAMETER = 16  # fp32 weight and gradient, AdamW's two fp32 moments


def llama_shape(graph: Graph) -> dict:
    """transformers' LlamaConfig fields of the network: its embedding, attention and MLP VNodes."""
    def params_of(op: str) -> list:
        return [graph.params(v) for v in graph.order if graph.vnodes[v].op == op]

    embedding, attention, mlp = params_of("embedding")[0], params_of("attention"), params_of("swiglu_mlp")
    if not attention or len(attention) != len(mlp):
        raise SystemExit("the anchor needs a network of attention and swiglu_mlp blocks (a Llama)")
    return dict(vocab_size=embedding.vocab_size, hidden_size=embedding.dim, intermediate_size=mlp[0].hidden,
                num_hidden_layers=len(attention), num_attention_heads=attention[0].heads,
                num_key_value_heads=getattr(attention[0], "kv_heads", None) or attention[0].heads,
                max_position_embeddings=graph.spec.context, tie_word_embeddings=bool(params_of("tied_lm_head_ce")),
                rope_theta=attention[0].rope_base)


# -- the anchor, in a process of its own -------------------------------------------------------
ANCHOR = """
import json, resource, sys, time, torch
from transformers import LlamaConfig, LlamaForCausalLM
shape, steps, batch, context, threads = json.loads(sys.argv[1])
torch.set_num_threads(threads)
def rss(): return int(open("/proc/self/status").read().split("VmRSS:")[1].split()[0]) * 1024
base = rss()
model = LlamaForCausalLM(LlamaConfig(**shape))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
tokens = torch.randint(0, shape["vocab_size"], (batch, context))
times = []
for _ in range(steps + 1):
    t0 = time.monotonic()
    model(input_ids=tokens, labels=tokens).loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    times.append(time.monotonic() - t0)
peak = int(open("/proc/self/status").read().split("VmHWM:")[1].split()[0]) * 1024
print(json.dumps({"params": sum(p.numel() for p in model.parameters()), "held": peak - base, "step_s": sorted(times[1:])[len(times[1:]) // 2]}))
"""


def available_bytes() -> int:
    """What a new process can take before the kernel must kill something: free memory and the caches it
    can drop (MemAvailable; free pages alone undercount it on a machine whose page cache is full)."""
    with open("/proc/meminfo") as meminfo:
        fields = dict(line.split(":", 1) for line in meminfo)
    return int(fields["MemAvailable"].split()[0]) * 1024


@dataclass(frozen=True)
class Unfit:
    """Why the anchor could not run here, and the bytes per parameter it needs at least: its state alone,
    or, when the kernel killed it for memory, more than the memory that was free when it started."""

    reason: str
    at_least: float


def plain_torch(shape: dict, graph: Graph, steps: int) -> dict | Unfit:
    """The anchor's figures, or why it could not run: its state alone exceeds the machine's free memory,
    or the kernel killed it for memory once its activations came on top."""
    params = sum(graph.param_count(v) for v in graph.order)
    need = params * PLAIN_BYTES_PER_PARAMETER
    free = available_bytes()
    if need > free:
        return Unfit(f"its state alone {need / 2**30:.1f} GiB, free {free / 2**30:.1f} GiB", PLAIN_BYTES_PER_PARAMETER)
    argv = json.dumps([shape, steps, BATCH, graph.spec.context, ANCHOR_THREADS])
    out = subprocess.run([sys.executable, "-c", ANCHOR, argv], capture_output=True, text=True)
    if out.returncode == -signal.SIGKILL or "MemoryError" in out.stderr:
        return Unfit(f"killed for memory: its state {need / 2**30:.1f} GiB and activations over the "
                     f"{free / 2**30:.1f} GiB free", max(PLAIN_BYTES_PER_PARAMETER, free / params))
    if out.returncode:
        raise SystemExit(f"the plain torch anchor failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


# -- the system ----------------------------------------------------------------------------------
async def system(network_yaml: str, pnodes: int, memory: str, steps: int, state: str) -> dict:
    config = SessionConfig(
        network_yaml=network_yaml, data=DataConfig(files=corpus()), steps=steps + 1, batch_size=BATCH,
        micro_batches=MICRO_BATCHES, precision="bf16", optimizer=OptimizerConfig(state=state),
        lr=LrSchedule(peak=1e-4, warmup_steps=1, min_lr=1e-5), min_pnodes=pnodes, update_ratio_every=0,
        pipeline={"stages": pnodes},  # the figure is of a pipeline over every PNode
    )
    names = [f"pnode-{i}" for i in range(pnodes)]
    with tempfile.TemporaryDirectory() as tmp:
        async with running_cluster(Path(tmp), pnodes, processes_on_machine=pnodes, pnode_memory=memory) as (client, sup):
            beats = await wait_for_pnodes(sup, names)
            sid = await run_to_end(client, config)
            peaks = {n: sup.peak_rss_bytes(n) or 0 for n in names}
            events = await session_events(client, sid)
    allocation = [e.payload for _, e in events if isinstance(e.payload, Allocated)][-1]
    hosted = {n: sum(p.params for p in allocation.placements if p.pnode == n) for n in names}
    per_param = {n: (peaks[n] - beats[n].process_bytes) / hosted[n] for n in names if hosted[n]}
    walls = step_walls(events)[1:]  # after the warmup step
    if not walls:
        walls = [e.payload.step_time_s for e in recorded_steps(events)][1:]
    hosts = {n: [p.vnode for p in allocation.placements if p.pnode == n] for n in names}
    return {"step_s": sorted(walls)[len(walls) // 2], "peaks": peaks, "per_param": per_param, "hosted": hosted,
            "hosts": hosts}


def main() -> int:
    bench = Bench("llama1b", __doc__)
    bench.parser.add_argument("--network", type=Path, default=REPO / "examples" / "networks" / "llama-1b.yaml")
    bench.parser.add_argument("--pnodes", type=int, default=4)
    bench.parser.add_argument("--memory", default="5GiB", help="what each PNode offers")
    bench.parser.add_argument("--steps", type=int, default=2)
    bench.parser.add_argument("--optimizer-state", choices=list(get_args(OptimizerState)), default="int8-sr")
    bench.parser.add_argument("--recompute", action="store_true",
                              help="every VNode but the loss recomputes its activations (as bench/memory.py runs)")
    args = bench.parse()
    if not args.network.exists():
        raise SystemExit(f"{args.network} not found: pass --network with a Llama-shaped network YAML")
    network_yaml = args.network.read_text()
    network_yaml = with_recompute(network_yaml) if args.recompute else network_yaml
    graph = Graph(load_network(network_yaml))
    name = graph.spec.name + (" (recomputing)" if args.recompute else "")
    tokens = BATCH * graph.spec.context

    ours = asyncio.run(system(network_yaml, args.pnodes, args.memory, args.steps, args.optimizer_state))
    for pnode, peak in ours["peaks"].items():
        vnodes = ours["hosts"][pnode]
        print(f"  {pnode}: peak RSS {peak / 2**30:.2f} GiB, {ours['per_param'].get(pnode, 0):.2f} bytes per parameter, "
              f"{ours['hosted'][pnode] / 1e6:.0f} M parameters ({len(vnodes)} VNodes: {vnodes[0]} .. {vnodes[-1]})"
              if vnodes else f"  {pnode}: hosts nothing")
    print(f"  {ours['step_s']:.1f} s a step (median of {args.steps})", flush=True)
    worst = max(ours["per_param"].values())
    stages = args.pnodes
    bound = MICRO_BATCHES / (MICRO_BATCHES + stages - 1)
    anchor = plain_torch(llama_shape(graph), graph, args.steps)
    if isinstance(anchor, Unfit):
        bench.row(f"{name}: plain torch cannot fit this machine ({anchor.reason}); {args.pnodes} PNodes of "
                  f"{args.memory}, {args.optimizer_state} state: bytes per parameter, the largest PNode",
                  "bytes/parameter", worst, "what plain torch needs at least", anchor.at_least, at_most(0.6))
        bench.row(f"{name}: tokens/s on {args.pnodes} PNodes (plain torch did not run)", "tokens/s",
                  tokens / ours["step_s"], "itself", tokens / ours["step_s"])
        return bench.finish()
    bench.row(f"{name} bf16, {args.optimizer_state} state, {args.pnodes} PNodes of {args.memory}: bytes per parameter, the largest PNode",
              "bytes/parameter", worst, f"LlamaForCausalLM fp32 + AdamW, {ANCHOR_THREADS} threads",
              anchor["held"] / anchor["params"], at_most(0.6))
    bench.row(f"{name}: tokens/s, batch {BATCH} x {graph.spec.context} in {MICRO_BATCHES} micro-batches "
              f"(a {stages}-stage pipeline computes at most {bound:.2f} of the time)", "tokens/s",
              tokens / ours["step_s"], f"LlamaForCausalLM + AdamW, {ANCHOR_THREADS} threads",
              tokens / anchor["step_s"], at_least(0.5))
    return bench.finish()


if __name__ == "__main__":
    raise SystemExit(main())
