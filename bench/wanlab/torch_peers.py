"""The torch baselines of the WAN benchmark: torch.distributed.pipelining over gloo, and the plain loop.

    python -m bench.wanlab.torch_peers stage --rank R --store HOST:PORT --schedule gpipe|1f1b
    python -m bench.wanlab.torch_peers plain --threads 2

Two stages in two processes, one thread each: stage 0 = embedding + the first half of the
blocks, stage 1 = the rest + final norm + the LM head, which keeps its own copy of the tied
embedding weight (as Megatron does): after each step the two stages all-reduce that weight's
gradient, so both copies take the same AdamW step and stay equal. Each process prints one JSON
line, {"step_s": [...], "losses": [...]}; `pipeline()` and `plain()` run them and read it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

from .lab import WanLab
from .torch_gpt import GPT, FirstStage, GPTShape, LastStage, batch, loss_fn

REPO = Path(__file__).resolve().parents[2]
NETWORK = REPO / "examples" / "networks" / "tiny-gpt.yaml"
SCHEDULES = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}


def run_stage(args: argparse.Namespace) -> dict:
    torch.set_num_threads(1)
    shape = GPTShape.from_network(args.network)
    host, port = args.store.rsplit(":", 1)
    store = dist.TCPStore(host, int(port), world_size=2, is_master=False, timeout=timedelta(seconds=120))
    dist.init_process_group("gloo", store=store, rank=args.rank, world_size=2)
    gpt, cut, micro = GPT(shape, args.seed), shape.layers // 2, args.batch // args.micro_batches
    # Static shapes: on the CPU, PipelineStage's runtime shape inference hangs. Examples of what
    # needs a gradient say so (requires_grad), or the stage would expect none back.
    hidden = torch.zeros(micro, shape.context, shape.dim, requires_grad=True)
    if args.rank == 0:
        module = FirstStage(gpt, range(cut))
        tied, example_in, example_out = module.embed.weight, torch.zeros(micro, shape.context, dtype=torch.long), hidden
    else:
        module = LastStage(gpt, range(cut, shape.layers))
        tied, example_in = module.head, hidden
        example_out = torch.zeros(micro, shape.context, shape.vocab, requires_grad=True)
    stage = PipelineStage(module, args.rank, 2, torch.device("cpu"), input_args=example_in, output_args=example_out)
    schedule = SCHEDULES[args.schedule](stage, n_microbatches=args.micro_batches, loss_fn=loss_fn)
    optimizer = torch.optim.AdamW(module.parameters(), lr=1e-3)
    times, losses = [], []
    for step in range(args.steps):
        tokens, targets = batch(shape, args.batch, step)
        t0 = time.perf_counter()
        micro_losses: list[torch.Tensor] = []
        if args.rank == 0:
            schedule.step(tokens)
        else:
            schedule.step(target=targets, losses=micro_losses)
        dist.all_reduce(tied.grad)  # embedding's + LM head's gradient of the one tied weight
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - t0)
        if micro_losses:
            losses.append(torch.stack(micro_losses).mean().item())
    dist.destroy_process_group()
    return {"step_s": times, "losses": losses}


def run_plain(args: argparse.Namespace) -> dict:
    torch.set_num_threads(args.threads)
    shape = GPTShape.from_network(args.network)
    model = GPT(shape, args.seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    times, losses = [], []
    for step in range(args.steps):
        tokens, targets = batch(shape, args.batch, step)
        t0 = time.perf_counter()
        loss = loss_fn(model(tokens), targets)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - t0)
        losses.append(loss.item())
    return {"step_s": times, "losses": losses}


# -- run from the benchmark / tests (the root namespace) ----------------------------------------
def _argv(mode: str, steps: int, batch_size: int, extra: list[str]) -> list[str]:
    return [sys.executable, "-m", "bench.wanlab.torch_peers", mode, "--steps", str(steps),
            "--batch", str(batch_size), *extra]


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", **extra}


def _result(proc: subprocess.Popen, what: str, timeout: float) -> dict:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"{what} failed ({proc.returncode}):\n{err[-3000:]}")
    return json.loads(out.strip().splitlines()[-1])


def pipeline(lab: WanLab, schedule: str, steps: int, batch_size: int = 8, micro_batches: int = 4,
             timeout: float = 900) -> list[dict]:
    """Both stages in `lab` (2 nodes, peers=True); gloo's store here in the root namespace, reached over the links."""
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=120))
    procs = []
    for rank, node in enumerate(lab.nodes[:2]):
        host, port = lab.expose(node, ("127.0.0.1", store.port))
        argv = _argv("stage", steps, batch_size, ["--rank", str(rank), "--store", f"{host}:{port}",
                                                  "--schedule", schedule, "--micro-batches", str(micro_batches)])
        procs.append(lab.popen(node, argv, cwd=REPO, env=_env(GLOO_SOCKET_IFNAME=node.ifname),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    deadline = time.monotonic() + timeout
    results = [_result(p, f"torch {schedule} stage {r}", max(1.0, deadline - time.monotonic()))
               for r, p in enumerate(procs)]
    del store
    return results


def plain(steps: int, batch_size: int = 8, threads: int = 2, timeout: float = 900) -> dict:
    """The single-process loop, on `threads` cores of the root namespace. Its OpenMP threads sleep
    while they wait: spinning, each parallel region waits for a thread another process holds off
    its core, and on a shared machine a step took 6 to 14 s instead of 1 to 3.6 (passive)."""
    cores = ",".join(str(i % (os.cpu_count() or 1)) for i in range(threads))
    proc = subprocess.Popen(["taskset", "-c", cores, *_argv("plain", steps, batch_size, ["--threads", str(threads)])],
                            cwd=REPO, env=_env(OMP_NUM_THREADS=str(threads), OMP_WAIT_POLICY="PASSIVE"), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    return _result(proc, "plain torch loop", timeout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="mode", required=True)
    for mode in ("stage", "plain"):
        p = sub.add_parser(mode)
        p.add_argument("--network", type=Path, default=NETWORK)
        p.add_argument("--steps", type=int, default=4)
        p.add_argument("--batch", type=int, default=8)
        p.add_argument("--seed", type=int, default=0)
    stage = sub.choices["stage"]
    stage.add_argument("--rank", type=int, choices=[0, 1], required=True)
    stage.add_argument("--store", required=True, help="HOST:PORT of the TCPStore")
    stage.add_argument("--schedule", choices=sorted(SCHEDULES), required=True)
    stage.add_argument("--micro-batches", type=int, default=4)
    sub.choices["plain"].add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    print(json.dumps(run_stage(args) if args.mode == "stage" else run_plain(args)), flush=True)


if __name__ == "__main__":
    main()
