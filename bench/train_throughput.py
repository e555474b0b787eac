"""Training a network end to end against the plain single-process torch loop of the same model.

    python -m bench.train_throughput [--network examples/networks/seed-64heads.yaml] [--quick] [--json PATH]

A step's time is the wall time from one recorded step to the next (`bench.sessions.step_walls`):
everything the system does for a step, appending its events included.

The anchor is the network written with torch's own modules (`computeall.tensorcore.plain_gpt`: nn.Embedding,
nn.Linear, nn.RMSNorm, scaled_dot_product_attention, cross-entropy over the tied head's logits),
trained the way a practitioner writes it: autograd, `clip_grad_norm_`, fused AdamW with the usual
decay groups, all cores, the same batch. It is measured before and after every system run (the
machine is shared and noisy) and its median over all of them is the reference.

The system runs the same YAML on an embedded cluster (`computeall.cli.embedded`):
- 1 PNode with every core: tokens/s vs the anchor (target >= 0.9).
- 1 and 3 PNodes, as written and with `recompute: true` on every VNode but the loss (every block,
  the embedding, the final norm; `with_recompute`): every PNode's peak RSS
  (Linux's VmHWM of each process); the largest with recompute / without (target <= 0.6). A PNode
  that hosts a recomputing VNode also returns freed tensors to the OS at once, which one without
  does only when its plan is tight (`computeall.pnode.lean_memory`). The 3 PNodes run 4
  micro-batches, as a pipeline does (with one, the allocator packs the network on one PNode).
- 2 PNodes with NATS on loopback and served over TLS (as `up --listen` does; every connection is
  authenticated in both): their ratio is what security costs (target >= 0.97).
In this process, on the same model, back to back: a step's time, the part of it clipping adds
(each VNode's gradient norm; the factor itself rides on the optimizer's unscaling divide; target
<= 2%), and the bytes a step allocates at most, with and without recompute (the process's RSS
also holds torch itself and the optimizer state, which recompute cannot shrink).
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import yaml

from computeall.cli.embedded import running_cluster
from computeall.cli.nats_server import free_port
from computeall.cli.session_view import session_events
from computeall.kernels.timing import peak_bytes
from computeall.network import Graph, load_network
from computeall.network.head_fusion import fuse_heads
from computeall.network.ops import OPS
from computeall.protocol.config import DataConfig, LrSchedule, OptimizerConfig, SessionConfig
from computeall.tensorcore.local_step import local_step
from computeall.tensorcore.optimizer import VNodeOptimizer
from computeall.tensorcore.plain_gpt import GPT, GPTShape, loss_fn
from computeall.tensorcore.vnode_runtime import VNodeRuntime

from .common import REPO, Bench, at_least, at_most
from .sessions import corpus, recorded_steps, run_to_end, step_walls
from .wanlab.torch_gpt import batch

SEED = REPO / "examples" / "networks" / "seed-64heads.yaml"


# -- the anchor: torch's own modules, one process ------------------------------------------------
def plain_torch(network: Path, steps: int, size: int, warmup: int) -> list[float]:
    """Step times of the practitioner's loop, all cores, random tokens (speed does not depend on them)."""
    torch.set_num_threads(os.cpu_count() or 1)
    shape = GPTShape.from_network(network)
    model = GPT(shape)
    optimizer = torch.optim.AdamW(model.param_groups(0.1), lr=1e-3, betas=(0.9, 0.95), fused=True)
    times = []
    for step in range(steps + warmup):
        tokens, targets = batch(shape, size, step)
        t0 = time.perf_counter()
        loss_fn(model(tokens), targets).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - t0)
    del model, optimizer
    return times[warmup:]


# -- the system ------------------------------------------------------------------------------------
@dataclass
class Run:
    name: str
    pnodes: int
    walls: list[float]  # seconds from each recorded step to the next, after the warmup
    peak_rss: dict[str, int | None]  # per PNode

    @property
    def step_s(self) -> float:
        return statistics.median(self.walls)


async def computeall(name: str, network_yaml: str, steps: int, size: int, pnodes: int, warmup: int,
                     tls: bool = False, **settings) -> Run:
    config = SessionConfig(
        network_yaml=network_yaml, data=DataConfig(files=corpus()), steps=steps + warmup, batch_size=size,
        lr=LrSchedule(peak=1e-3, warmup_steps=2, min_lr=1e-4), min_pnodes=pnodes,
        pipeline={"stages": pnodes}, **settings,
    )
    with tempfile.TemporaryDirectory() as tmp:
        # one PNode takes every core, as the anchor does; several share them
        listen = f"127.0.0.1:{free_port()}" if tls else None
        async with running_cluster(Path(tmp), pnodes, processes_on_machine=pnodes, listen=listen) as (client, supervisor):
            sid = await run_to_end(client, config)
            events = await session_events(client, sid)
            peaks = {f"pnode-{i}": supervisor.peak_rss_bytes(f"pnode-{i}") for i in range(pnodes)}
    shares = [e.payload for e in recorded_steps(events)][warmup:]
    print(f"  {name}: median compute {statistics.median(x.compute_s for x in shares):.2f} s, bus wait "
          f"{statistics.median(x.wait_s for x in shares):.2f} s, {sum(bool(x.clipped) for x in shares)} steps clipped", flush=True)
    return Run(name, pnodes, step_walls(events)[warmup:], peaks)


def with_recompute(network_yaml: str) -> str:
    """`recompute: true` on every VNode but the loss: the fused head computes its gradients in its
    forward, so recomputing it would run the costliest VNode twice to free what its backward, right
    after, hands on anyway."""
    losses = {v.id for v in load_network(network_yaml).vnodes if OPS[v.op].is_loss}
    document = yaml.safe_load(network_yaml)
    document.setdefault("defaults", {})["recompute"] = True
    kept = [entry for entry in document["vnodes"] if entry.get("id") in losses]
    if len(kept) != len(losses):
        raise SystemExit(f"cannot find the loss VNodes {sorted(losses)} among the network's top-level vnodes "
                         "to keep them from recomputing")
    for entry in kept:
        entry["recompute"] = False
    return yaml.safe_dump(document, sort_keys=False)


@dataclass
class InProcess:
    step_s: float  # forward, backward and update of one step, the whole model, every core
    norm_s: float  # what clipping adds to it: each VNode's squared gradient norm
    peak_bytes: int  # the most bytes allocated during a step's forward and backward


def in_process(network_yaml: str, size: int, reps: int) -> InProcess:
    """One PNode's work without the bus, measured back to back so the machine's load is the same
    for all three figures."""
    torch.set_num_threads(os.cpu_count() or 1)
    graph = Graph(fuse_heads(load_network(network_yaml))[0])
    runtime = VNodeRuntime(graph, graph.order, 0, torch.device("cpu"))
    optimizer = VNodeOptimizer(runtime.parameters(), OptimizerConfig(), runtime.decay_groups())
    tokens = [torch.randint(0, graph.spec.vocab_size, (size, graph.spec.context + 1))]
    steps, norms = [], []
    for _ in range(reps + 1):
        t0 = time.perf_counter()
        local_step(runtime, tokens)
        t1 = time.perf_counter()
        runtime.grad_sq_norms()
        t2 = time.perf_counter()
        optimizer.step(1e-4)
        runtime.zero_grad()
        steps.append(time.perf_counter() - t2 + t1 - t0)
        norms.append(t2 - t1)
    peak = peak_bytes(lambda: local_step(runtime, tokens), torch.device("cpu"))
    return InProcess(statistics.median(steps[1:]), statistics.median(norms[1:]), peak)


def main() -> int:
    bench = Bench("train_throughput", __doc__)
    bench.parser.add_argument("--network", type=Path, default=SEED)
    bench.parser.add_argument("--batch", type=int, default=8)
    args = bench.parse()
    steps, warmup = (4, 2) if args.quick else (10, 3)
    text = args.network.read_text()
    context = load_network(text).context
    tokens_per_step = args.batch * context

    pipelined = {"micro_batches": 4}
    plans = [
        ("1 PNode", 1, text, {}),
        ("1 PNode, recompute", 1, with_recompute(text), {}),
        ("3 PNodes", 3, text, pipelined),
        ("3 PNodes, recompute", 3, with_recompute(text), pipelined),
        # pipelined, so that activations and gradients cross the bus (with one micro-batch the
        # allocator may keep the whole network on one PNode, and TLS would carry nothing)
        ("2 PNodes", 2, text, pipelined),
        ("2 PNodes, TLS", 2, text, {"tls": True, **pipelined}),
    ]
    anchor_times = plain_torch(args.network, steps, args.batch, warmup)
    runs = []
    for name, pnodes, yaml_text, settings in plans:
        runs.append(asyncio.run(computeall(name, yaml_text, steps, args.batch, pnodes, warmup, **settings)))
        anchor_times += plain_torch(args.network, steps, args.batch, warmup)
    anchor_s = statistics.median(anchor_times)
    by_name = {r.name: r for r in runs}
    plain_work, recompute_work = in_process(text, args.batch, steps), in_process(with_recompute(text), args.batch, steps)
    net = f"{args.network.stem}, batch {args.batch} x {context}"
    plain_is = f"plain torch loop, 1 process, {os.cpu_count()} threads"
    anchor_tps = tokens_per_step / anchor_s
    for r in runs:
        target = at_least(0.9) if r.name == "1 PNode" else None
        bench.row(f"{net}, {r.name}", "tokens/s", tokens_per_step / r.step_s, plain_is, anchor_tps, target)

    def largest_rss(run: Run) -> int:
        """The largest PNode's peak RSS: the memory a machine must offer (recompute changes the memory
        model, so the allocator may place VNodes elsewhere: PNode by PNode, two runs need not host the same)."""
        return max(v for v in run.peak_rss.values() if v)

    for setup in ("1 PNode", "3 PNodes"):
        bench.row(f"{net}, {setup} with recompute: the largest PNode's peak RSS", "bytes",
                  largest_rss(by_name[f"{setup}, recompute"]), "without recompute", largest_rss(by_name[setup]), at_most(0.6))
    one_process = f"{net}, one PNode's work in this process"
    bench.row(f"{one_process} with recompute: a step's peak allocation", "bytes", recompute_work.peak_bytes,
              "without recompute", plain_work.peak_bytes)
    bench.row(f"{one_process} with recompute: a step", "s", recompute_work.step_s, "without recompute", plain_work.step_s)
    bench.row(f"{one_process}: what clipping adds (each VNode's gradient norm)", "s", plain_work.norm_s,
              "the step", plain_work.step_s, at_most(0.02))
    bench.row(f"{net}, 2 PNodes over TLS", "tokens/s", tokens_per_step / by_name["2 PNodes, TLS"].step_s,
              "2 PNodes over plain loopback", tokens_per_step / by_name["2 PNodes"].step_s, at_least(0.97))
    return bench.finish()


if __name__ == "__main__":
    sys.exit(main())
