"""Spot checks: how fast a corrupting PNode is caught, what checking costs, and that the session ends exact.

1. Detection: the share of sessions in which a PNode corrupting 1%, 10% or 100% of its results is
   caught within a horizon, and the steps it takes, at check rates 0.01, 0.05 and 0.1. Which items
   are checked (the check stream) and which results are corrupted (`--fault`) are both pure
   functions of their seeds and the allocation, so this runs the system's own stream and fault
   functions over many stream seeds, without training; real sessions then confirm the model: each
   is caught at exactly the step the model derives from its recorded seed.
2. Overhead: median step time of an honest 3-PNode session at rate 0.05 against the same session
   with checks off, run alternately in one cluster (target <= 1.10); and the CPU seconds its
   processes spent per step, which a machine shared with other work does not blur as much.
3. Exactness: the final parameter digests of the session that caught and quarantined a corrupting
   PNode (and rolled back) equal those of the clean run.
4. Where a PNode's share of the overhead goes, in one process on one thread (CPU time, which other
   work on the machine blurs least): a step with the spot-check audit (ledger and kept material)
   against the same step without it, and the part of it spent hashing; and the digests per core,
   blake3 (ledger, wire frames) against blake2b.

A step's time is the wall time from one recorded step to the next.

    python -m bench.verify [--quick] [--json PATH]
"""

from __future__ import annotations

import hashlib
import statistics
import sys
import tempfile
import time
from pathlib import Path

import blake3
import psutil
import torch

from computeall.cli.embedded import running_cluster
from computeall.cli.session_view import session_events
from computeall.network import Graph, load_network_file
from computeall.network.ops import DATA_INPUTS
from computeall.orchestrator.allocator import PNodeCapacity, allocate
from computeall.orchestrator.verification.stream import checks_of_step
from computeall.protocol.config import DataConfig, SessionConfig, VerifyConfig
from computeall.protocol.events import (
    Allocated, CheckpointCommitted, ChecksCompleted, PNodeQuarantined, VerificationSeeded,
)
from computeall.pnode.audit import StepAudit
from computeall.protocol.faults import FaultSpec
from computeall.tensorcore import digest
from computeall.tensorcore.local_step import local_step
from computeall.tensorcore.vnode_runtime import VNodeRuntime
from computeall.tensorcore.wire_formats import wire_format

from .common import REPO, Bench, at_most, exactly
from .sessions import run_to_end, small_corpus, step_walls

PNODES = ["pnode-0", "pnode-1", "pnode-2"]
FAULTY = "pnode-2"
CORRUPTIONS = (0.01, 0.1, 1.0)
RATES = (0.01, 0.05, 0.1)
MICRO_BATCHES = 4


def first_detection(seed: int, verify: VerifyConfig, graph: Graph, assignment: dict[str, str], fault: FaultSpec,
                    horizon: int) -> int | None:
    """The step whose checks catch FAULTY, as the system decides it: a checked item of its own whose
    output (or, when its backward is checked too, the gradient it handed back) it corrupted, or a check
    it ran whose result it corrupted. None when not within `horizon` steps."""
    devices = {p: "cpu" for p in PNODES}
    for step in range(horizon):
        for item in checks_of_step(seed, step, verify, graph, MICRO_BATCHES, assignment, devices):
            hits = lambda what: fault.hits(FAULTY, step, item.micro, item.vnode, what)  # noqa: E731
            if item.pnode == FAULTY:
                hands_back = any(i not in DATA_INPUTS for i in graph.vnodes[item.vnode].inputs)
                if hits("output") or (item.backward and hands_back and hits("gradient")):
                    return step
            elif item.checker == FAULTY and hits("check"):
                return step
    return None


def detection_table(graph: Graph, assignment: dict[str, str], trials: int, horizon: int) -> list[dict]:
    rows = []
    for corruption in CORRUPTIONS:
        for rate in RATES:
            fault, verify = FaultSpec(rate=corruption), VerifyConfig(rate=rate)
            found = [first_detection(seed, verify, graph, assignment, fault, horizon) for seed in range(trials)]
            steps = sorted(s + 1 for s in found if s is not None)  # steps trained until caught
            rows.append({
                "corruption": corruption, "rate": rate, "trials": trials, "horizon_steps": horizon,
                "detected_share": len(steps) / trials,
                "median_steps_to_detection": statistics.median(steps) if steps else None,
                "p90_steps_to_detection": steps[int(0.9 * (len(steps) - 1))] if steps else None,
            })
    return rows


def config(network: Path, steps: int, rate: float, micro_batches: int = MICRO_BATCHES) -> SessionConfig:
    return SessionConfig(network_yaml=network.read_text(), data=DataConfig(files=small_corpus()), steps=steps, seed=1,
                         micro_batches=micro_batches, min_pnodes=3, pipeline={"stages": 3},
                         verify=VerifyConfig(rate=rate))


async def session(client, cfg: SessionConfig) -> list:
    """The session's events, in log order."""
    sid = await run_to_end(client, cfg, timeout=3600)
    return [e for _, e in await session_events(client, sid)]


def payloads(events: list) -> list:
    return [e.payload for e in events]


def final_digests(events: list) -> dict[str, str]:
    last = [p for p in payloads(events) if isinstance(p, CheckpointCommitted)][-1]
    return {o.vnode: o.digest for o in last.objects}


def median_step_s(events: list, skip: int = 2) -> float:
    """The median wall time between recorded steps, after the first `skip` steps."""
    return statistics.median(step_walls([(0, e) for e in events])[skip:])


def cpu_seconds(processes: list[psutil.Process]) -> float:
    return sum(sum(p.cpu_times()[:2]) for p in processes)


async def overhead(network: Path, steps: int, rounds: int, micro_batches: int) -> tuple[dict, dict[str, str], dict[str, str]]:
    """Rate 0.05 against checks off, alternately in one cluster of honest PNodes."""
    runs: dict[float, list[tuple[list, float]]] = {0.0: [], 0.05: []}
    with tempfile.TemporaryDirectory() as tmp:
        async with running_cluster(Path(tmp), pnodes=3) as (client, supervisor):
            processes = [psutil.Process(r.process.pid) for r in supervisor.services.values()
                         if r.spec.kind in ("pnode", "orchestrator")]
            await session(client, config(network, 2, 0.0))  # warm-up: dataset, imports
            for _ in range(rounds):
                for rate in runs:
                    before = cpu_seconds(processes)
                    events = await session(client, config(network, steps, rate, micro_batches))
                    runs[rate].append((events, (cpu_seconds(processes) - before) / steps))
    plain, verified = runs[0.0], runs[0.05]
    anchor = statistics.median(median_step_s(p) for p, _ in plain)
    value = statistics.median(median_step_s(v) for v, _ in verified)
    cpu_anchor = statistics.median(c for _, c in plain)
    cpu_value = statistics.median(c for _, c in verified)
    checks = [len(p.checks) for v, _ in verified for p in payloads(v) if isinstance(p, ChecksCompleted)]
    row = {"rate": 0.05, "micro_batches": micro_batches, "median_step_s": value, "anchor_median_step_s": anchor,
           "cpu_s_per_step": cpu_value, "anchor_cpu_s_per_step": cpu_anchor, "checks_per_step": sum(checks) / (rounds * steps),
           "machine_load_1min": psutil.getloadavg()[0], "cores": psutil.cpu_count()}
    return row, final_digests(plain[0][0]), final_digests(verified[0][0])


def ledger_cost(graph: Graph, micro_batches: int, rounds: int) -> dict:
    """Step CPU with the audit against without (alternately, medians), on one thread."""
    torch.set_num_threads(1)
    runtime = VNodeRuntime(graph, list(graph.order), 0, torch.device("cpu"))
    g = torch.Generator().manual_seed(0)
    batches = [torch.randint(0, graph.spec.vocab_size, (8 // micro_batches, graph.spec.context + 1), generator=g)
               for _ in range(micro_batches)]
    wire = {v: wire_format(graph.wire(v)) for v in graph.order}
    audit = StepAudit("p", graph, runtime, wire, True, None)
    hashing = {"s": 0.0, "bytes": 0}
    data_digest = digest._data_digest

    def timed_data_digest(tensor):  # the ledger's hashing, measured where it happens
        t0 = time.thread_time()
        out = data_digest(tensor)
        hashing["s"] += time.thread_time() - t0
        hashing["bytes"] += tensor.numel() * tensor.element_size()
        return out

    def step(audited: bool) -> float:
        runtime.observer = audit if audited else None
        audit.begin(0)
        t0 = time.thread_time()
        local_step(runtime, batches)
        audit.end()
        audit.forget_step()
        runtime.zero_grad()
        return time.thread_time() - t0

    digest._data_digest = timed_data_digest
    try:
        step(False), step(True)  # warm-up
        plain, audited, hashed, hashed_bytes = [], [], [], 0
        for _ in range(rounds):
            plain.append(step(False))
            hashing.update(s=0.0, bytes=0)
            audited.append(step(True))
            hashed.append(hashing["s"])
            hashed_bytes = hashing["bytes"]
    finally:
        digest._data_digest = data_digest
    anchor = statistics.median(plain)
    return {"micro_batches": micro_batches, "step_cpu_s": statistics.median(audited), "anchor": "the same step, no audit",
            "anchor_step_cpu_s": anchor, "ratio": statistics.median(audited) / anchor,
            "hashing_share_of_step": statistics.median(hashed) / anchor, "hashed_mb_per_step": hashed_bytes / 1e6}


def digest_speeds() -> dict:
    """GB/s on one core over a 2 MB tensor (a tiny-gpt activation at batch 8)."""
    data = torch.randn(8 * 256 * 256).view(torch.uint8).numpy()

    def speed(fn) -> float:
        times = []
        for _ in range(30):
            t0 = time.thread_time()
            fn()
            times.append(time.thread_time() - t0)
        return data.nbytes / statistics.median(times) / 1e9

    b3, b2 = speed(lambda: blake3.blake3(data).digest()), speed(lambda: hashlib.blake2b(data, digest_size=16).digest())
    return {"blake3_gb_s": b3, "anchor": "blake2b (the wire codec's before)", "blake2b_gb_s": b2, "ratio": b3 / b2}


async def caught(network: Path, steps: int, corruption: float, rate: float, graph: Graph) -> tuple[dict, dict[str, str]]:
    """A real session with a corrupting PNode: where it was caught, against where the model says."""
    fault = FaultSpec(rate=corruption)
    with tempfile.TemporaryDirectory() as tmp:
        async with running_cluster(Path(tmp), pnodes=3, faults={FAULTY: fault}) as (client, _):
            events = await session(client, config(network, steps, rate))
    seed = next(p.seed for p in payloads(events) if isinstance(p, VerificationSeeded))
    assignment = {pl.vnode: pl.pnode for pl in next(p for p in payloads(events) if isinstance(p, Allocated)).placements}
    quarantined = [p for p in payloads(events) if isinstance(p, PNodeQuarantined)]
    predicted = first_detection(seed, VerifyConfig(rate=rate), graph, assignment, fault, steps)
    observed = quarantined[0].step if quarantined else None
    row = {"corruption": corruption, "rate": rate, "seed": seed, "predicted_step": predicted, "observed_step": observed,
           "quarantined": [p.pnode for p in quarantined], "match": predicted == observed}
    return row, final_digests(events)


async def measure(bench: Bench, quick: bool) -> None:
    network = REPO / "examples" / "networks" / ("micro-gpt.yaml" if quick else "tiny-gpt.yaml")
    graph = Graph(load_network_file(network))
    capacities = [PNodeCapacity(p, 8 << 30) for p in PNODES]
    assignment = allocate(graph, capacities, 8, 8 // MICRO_BATCHES, stages=len(PNODES)).assignment  # as the sessions
    trials, horizon = (200, 200) if quick else (1000, 500)
    detection = detection_table(graph, assignment, trials, horizon)
    in_process = [ledger_cost(graph, m, 3 if quick else 7) for m in (1, MICRO_BATCHES)]
    steps = 10 if quick else 24
    rounds = 1 if quick else 2
    costs = []
    for micro_batches in (1, MICRO_BATCHES):  # the default, and the split the detection figures use
        cost, clean_digests, verified_digests = await overhead(network, steps, rounds, micro_batches)
        costs.append((cost, verified_digests == clean_digests))
        if micro_batches == MICRO_BATCHES:
            clean = clean_digests
    real = [(0.1, 0.1)] if quick else [(1.0, 0.1), (0.1, 0.1), (0.1, 0.05)]
    confirmed, after_rollback = [], []
    for corruption, rate in real:
        row, digests = await caught(network, steps, corruption, rate, graph)
        confirmed.append(row)
        after_rollback.append(digests == clean)
    name = f"{network.stem} on {len(PNODES)} PNodes, {MICRO_BATCHES} micro-batches, {FAULTY} corrupting"
    for r in detection:
        share = f"caught within {r['horizon_steps']} steps, corrupting {r['corruption']:.0%} at rate {r['rate']}"
        bench.row(f"{name}: sessions {share} (model)", "sessions", r["detected_share"] * r["trials"],
                  "stream seeds tried", r["trials"])
    for r in confirmed:
        # steps trained until caught (0: never), the real session's against the model's
        bench.row(f"{name}: a real session corrupting {r['corruption']:.0%} at rate {r['rate']}, caught after",
                  "steps", (r["observed_step"] + 1) if r["observed_step"] is not None else 0, "the model's prediction",
                  (r["predicted_step"] + 1) if r["predicted_step"] is not None else 0, exactly(1.0))
    for (o, _) in costs:
        at = f"{network.stem}, 3 honest PNodes, {o['micro_batches']} micro-batch(es), rate 0.05 ({o['checks_per_step']:.1f} checks/step)"
        bench.row(f"{at}: step", "s", o["median_step_s"], "checks off", o["anchor_median_step_s"], at_most(1.10))
        bench.row(f"{at}: CPU of its processes per step", "CPU s", o["cpu_s_per_step"], "checks off",
                  o["anchor_cpu_s_per_step"])
    for r in in_process:
        at = f"{network.stem} in one process on one thread, {r['micro_batches']} micro-batch(es)"
        bench.row(f"{at}: step with the audit", "CPU s", r["step_cpu_s"], "the same step, no audit", r["anchor_step_cpu_s"])
        bench.row(f"{at}: hashing ({r['hashed_mb_per_step']:.0f} MB)", "CPU s", r["hashing_share_of_step"] * r["anchor_step_cpu_s"],
                  "the step, no audit", r["anchor_step_cpu_s"])
    d = digest_speeds()
    bench.row("blake3 of a 2 MB tensor on one core", "GB/s", d["blake3_gb_s"], "blake2b (the wire codec's before)",
              d["blake2b_gb_s"])
    same = sum(same for _, same in costs) + sum(after_rollback)
    bench.row("final parameters of the verified and the caught-and-rolled-back sessions equal the clean one's",
              "sessions bit-identical", same, "sessions compared", len(costs) + len(after_rollback), exactly(1.0))


def main() -> int:
    return Bench("verify", __doc__).run(measure)


if __name__ == "__main__":
    sys.exit(main())
