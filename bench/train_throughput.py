"""Tokens per second of `computeall run` on 1 and 2 PNodes against a plain single-process torch loop.

The anchor is the same model (built from the same YAML, same init), the same batch and
the same total thread count, trained with ordinary autograd and torch's AdamW in one
process, measured in the same run. Also prints each run's per-step split between
compute and waiting on the bus. The 2-PNode run is repeated with NATS served over TLS (as
`up --public` does; every connection is authenticated in both): its ratio to the loopback
run is what security costs.

    python bench/train_throughput.py [--quick] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from computeall.cli.nats_server import free_port
from computeall.network import Graph, load_network_file
from computeall.protocol.config import OptimizerConfig
from computeall.tensorcore.optimizer import VNodeOptimizer
from computeall.tensorcore.reference_model import ReferenceModel

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"
SHAKESPEARE = REPO.parent / "shared" / "data" / "tinyshakespeare.txt"


def corpus() -> list[str]:
    if SHAKESPEARE.exists():
        return [str(SHAKESPEARE)]
    from computeall.cli.default_corpus import stdlib_files

    return stdlib_files(1 << 20)


def plain_torch(network: Path, steps: int, batch: int, warmup: int) -> list[float]:
    """Step times of the single-process loop, all cores, random tokens (speed does not depend on them)."""
    torch.set_num_threads(os.cpu_count() or 1)
    graph = Graph(load_network_file(network))
    model = ReferenceModel(graph, session_seed=1)
    optimizer = VNodeOptimizer(model.named_vnode_parameters(), OptimizerConfig())
    generator = torch.Generator().manual_seed(0)
    times = []
    for step in range(steps + warmup):
        tokens = torch.randint(0, graph.spec.vocab_size, (batch, graph.spec.context + 1), generator=generator)
        t0 = time.perf_counter()
        loss = model(tokens[:, :-1], tokens[:, 1:]) / tokens[:, 1:].numel()
        loss.backward()
        optimizer.step(1e-3)
        model.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - t0)
    return times[warmup:]


def computeall_run(network: Path, steps: int, batch: int, pnodes: int, micro: int, warmup: int, tls: bool = False) -> list[dict]:
    with tempfile.TemporaryDirectory() as tmp:
        metrics = Path(tmp) / "m.jsonl"
        cmd = [str(Path(sys.executable).parent / "computeall"), "run", str(network), "--data", *corpus(),
               "--steps", str(steps + warmup), "--batch-size", str(batch), "--micro-batches", str(micro),
               "--pnodes", str(pnodes), "--metrics-out", str(metrics), "--no-progress"]
        if tls:
            cmd += ["--listen", f"127.0.0.1:{free_port()}"]
        subprocess.run(cmd, check=True, capture_output=True, timeout=1800)
        rows = [json.loads(line) for line in metrics.read_text().splitlines()]
    return rows[warmup:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer steps")
    parser.add_argument("--json", type=Path, default=RESULTS / "train_throughput.json")
    parser.add_argument("--network", type=Path, default=REPO / "examples" / "networks" / "tiny-gpt.yaml")
    parser.add_argument("--batch", type=int, default=8)
    args = parser.parse_args()
    steps, warmup = (6, 2) if args.quick else (16, 3)
    context = load_network_file(args.network).context
    tokens_per_step = args.batch * context

    # The machine is shared and noisy: the anchor is measured before and after every run
    # and its median over all of them is the reference.
    anchor_times = plain_torch(args.network, steps, args.batch, warmup)
    runs = []
    for pnodes, micro, tls in [(1, 1, False), (2, 1, False), (2, 1, True), (2, 4, False)]:
        runs.append((pnodes, micro, tls, computeall_run(args.network, steps, args.batch, pnodes, micro, warmup, tls)))
        anchor_times += plain_torch(args.network, steps, args.batch, warmup)
    anchor_tps = tokens_per_step / statistics.median(anchor_times)
    rows = [{"name": "plain torch, 1 process", "pnodes": 0, "micro_batches": 1,
             "tokens_per_s": anchor_tps, "median_step_s": statistics.median(anchor_times)}]
    for pnodes, micro, tls, metrics in runs:
        step_s = statistics.median(r["step_time_s"] for r in metrics)
        rows.append({
            "name": f"computeall run, {pnodes} PNode(s){', TLS' if tls else ''}",
            "pnodes": pnodes,
            "micro_batches": micro,
            "tls": tls,
            "tokens_per_s": tokens_per_step / step_s,
            "median_step_s": step_s,
            "median_compute_s": statistics.median(r["compute_s"] for r in metrics),
            "median_bus_wait_s": statistics.median(r["wait_s"] for r in metrics),
            "ratio_vs_plain_torch": tokens_per_step / step_s / anchor_tps,
        })

    loopback, secured = (next(r for r in rows if r["pnodes"] == 2 and r["micro_batches"] == 1 and r.get("tls") == tls)
                         for tls in (False, True))
    rows.append({"name": "2 PNodes: TLS vs loopback", "ratio_tls_vs_loopback": secured["tokens_per_s"] / loopback["tokens_per_s"]})

    print(f"{args.network.name}, batch {args.batch}x{context}, {os.cpu_count()} cores, medians of {steps} steps")
    print(f"{'run':<34}{'micro':>6}{'tokens/s':>11}{'step':>9}{'compute':>9}{'bus wait':>9}{'ratio':>7}")
    for r in rows[:-1]:
        print(f"{r['name']:<34}{r['micro_batches']:>6}{r['tokens_per_s']:>11.0f}{r['median_step_s']:>8.3f}s"
              f"{r.get('median_compute_s', r['median_step_s']):>8.3f}s{r.get('median_bus_wait_s', 0.0):>8.3f}s"
              f"{r.get('ratio_vs_plain_torch', 1.0):>7.2f}")
    print(f"2 PNodes over TLS / over loopback: {rows[-1]['ratio_tls_vs_loopback']:.3f} (target >= 0.97)")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
