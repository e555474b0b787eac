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

    python bench/verify.py [--quick] [--json PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import blake3
import psutil
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from computeall.cli.embedded import running_cluster  # noqa: E402
from computeall.cli.session_view import session_events  # noqa: E402
from computeall.network import Graph, load_network_file  # noqa: E402
from computeall.network.ops import DATA_INPUTS  # noqa: E402
from computeall.orchestrator.allocator import PNodeCapacity, allocate  # noqa: E402
from computeall.orchestrator.verification.stream import checks_of_step  # noqa: E402
from computeall.protocol.config import DataConfig, SessionConfig, VerifyConfig  # noqa: E402
from computeall.protocol.events import (  # noqa: E402
    Allocated, CheckpointCommitted, ChecksCompleted, PNodeQuarantined, StepCompleted, VerificationSeeded,
)
from computeall.pnode.audit import StepAudit  # noqa: E402
from computeall.protocol.faults import FaultSpec  # noqa: E402
from computeall.tensorcore import digest  # noqa: E402
from computeall.tensorcore.local_step import local_step  # noqa: E402
from computeall.tensorcore.vnode_runtime import VNodeRuntime  # noqa: E402
from computeall.tensorcore.wire_formats import wire_format  # noqa: E402
from tests.integration.cluster import stdlib_corpus  # noqa: E402
from tests.integration.sessions import run_to_end  # noqa: E402

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
    return SessionConfig(network_yaml=network.read_text(), data=DataConfig(files=stdlib_corpus()), steps=steps, seed=1,
                         micro_batches=micro_batches, min_pnodes=3, pipeline={"stages": 3},
                         verify=VerifyConfig(rate=rate))


async def session(client, cfg: SessionConfig) -> list:
    sid = await run_to_end(client, cfg, timeout=3600)
    return [e.payload for _, e in await session_events(client, sid)]


def final_digests(payloads: list) -> dict[str, str]:
    last = [p for p in payloads if isinstance(p, CheckpointCommitted)][-1]
    return {o.vnode: o.digest for o in last.objects}


def median_step_s(payloads: list, skip: int = 2) -> float:
    return statistics.median(p.step_time_s for p in payloads if isinstance(p, StepCompleted) and p.step >= skip)


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
                    payloads = await session(client, config(network, steps, rate, micro_batches))
                    runs[rate].append((payloads, (cpu_seconds(processes) - before) / steps))
    plain, verified = runs[0.0], runs[0.05]
    anchor = statistics.median(median_step_s(p) for p, _ in plain)
    value = statistics.median(median_step_s(v) for v, _ in verified)
    cpu_anchor = statistics.median(c for _, c in plain)
    cpu_value = statistics.median(c for _, c in verified)
    checks = [len(p.checks) for v, _ in verified for p in v if isinstance(p, ChecksCompleted)]
    row = {"rate": 0.05, "micro_batches": micro_batches, "median_step_s": value, "anchor": "the same session, checks off", "anchor_median_step_s": anchor,
           "ratio": value / anchor, "target": 1.10, "cpu_s_per_step": cpu_value, "anchor_cpu_s_per_step": cpu_anchor,
           "cpu_ratio": cpu_value / cpu_anchor, "checks_per_step": sum(checks) / (rounds * steps),
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
            payloads = await session(client, config(network, steps, rate))
    seed = next(p.seed for p in payloads if isinstance(p, VerificationSeeded))
    assignment = {pl.vnode: pl.pnode for pl in next(p for p in payloads if isinstance(p, Allocated)).placements}
    quarantined = [p for p in payloads if isinstance(p, PNodeQuarantined)]
    predicted = first_detection(seed, VerifyConfig(rate=rate), graph, assignment, fault, steps)
    observed = quarantined[0].step if quarantined else None
    row = {"corruption": corruption, "rate": rate, "seed": seed, "predicted_step": predicted, "observed_step": observed,
           "quarantined": [p.pnode for p in quarantined], "match": predicted == observed}
    return row, final_digests(payloads)


async def main(args: argparse.Namespace) -> dict:
    network = REPO / "examples" / "networks" / ("micro-gpt.yaml" if args.quick else "tiny-gpt.yaml")
    graph = Graph(load_network_file(network))
    capacities = [PNodeCapacity(p, 8 << 30) for p in PNODES]
    assignment = allocate(graph, capacities, 8, 8 // MICRO_BATCHES, stages=len(PNODES)).assignment  # as the sessions
    trials, horizon = (200, 200) if args.quick else (1000, 500)
    detection = detection_table(graph, assignment, trials, horizon)
    in_process = [ledger_cost(graph, m, 3 if args.quick else 7) for m in (1, MICRO_BATCHES)]
    steps = 10 if args.quick else 24
    rounds = 1 if args.quick else 2
    costs = []
    for micro_batches in (1, MICRO_BATCHES):  # the default, and the split the detection figures use
        cost, clean_digests, verified_digests = await overhead(network, steps, rounds, micro_batches)
        costs.append((cost, verified_digests == clean_digests))
        if micro_batches == MICRO_BATCHES:
            clean, verified = clean_digests, verified_digests
    real = [(0.1, 0.1)] if args.quick else [(1.0, 0.1), (0.1, 0.1), (0.1, 0.05)]
    confirmed, after_rollback = [], []
    for corruption, rate in real:
        row, digests = await caught(network, steps, corruption, rate, graph)
        confirmed.append(row)
        after_rollback.append(digests == clean)
    return {
        "network": network.name, "pnodes": len(PNODES), "micro_batches": MICRO_BATCHES, "corrupting_pnode": FAULTY,
        "hosted_by_corrupting_pnode": [v for v in graph.order if assignment[v] == FAULTY],
        "detection": detection,
        "model_confirmed_by_real_sessions": confirmed,
        "overhead": [cost for cost, _ in costs],
        "ledger_in_process": in_process,
        "digests": digest_speeds(),
        "final_parameters_bit_identical": {"verified_vs_clean": all(same for _, same in costs),
                                           "caught_and_rolled_back_vs_clean": all(after_rollback)},
    }


def report(result: dict) -> None:
    print(f"{result['network']} on {result['pnodes']} PNodes, {result['micro_batches']} micro-batches; "
          f"{result['corrupting_pnode']} hosts {len(result['hosted_by_corrupting_pnode'])} VNodes and corrupts")
    print(f"{'corrupts':>9}{'rate':>7}{'caught':>9}{'median steps':>14}{'p90 steps':>11}   (within horizon)")
    for r in result["detection"]:
        median = "—" if r["median_steps_to_detection"] is None else f"{r['median_steps_to_detection']:g}"
        p90 = "—" if r["p90_steps_to_detection"] is None else f"{r['p90_steps_to_detection']:g}"
        print(f"{r['corruption']:>9.0%}{r['rate']:>7.2f}{r['detected_share']:>9.1%}{median:>14}{p90:>11}   "
              f"({r['horizon_steps']} steps, {r['trials']} stream seeds)")
    for r in result["model_confirmed_by_real_sessions"]:
        print(f"real session, {r['corruption']:.0%} corrupted at rate {r['rate']}: caught at step {r['observed_step']}, "
              f"model says {r['predicted_step']} ({'match' if r['match'] else 'MISMATCH'})")
    for o in result["overhead"]:
        print(f"{o['micro_batches']} micro-batches, step time at rate {o['rate']}: {o['median_step_s'] * 1e3:.0f} ms vs "
              f"{o['anchor_median_step_s'] * 1e3:.0f} ms checks off: ratio {o['ratio']:.3f} (target <= {o['target']}), "
              f"{o['checks_per_step']:.1f} checks per step")
        print(f"  CPU per step: {o['cpu_s_per_step']:.2f} s vs {o['anchor_cpu_s_per_step']:.2f} s: ratio {o['cpu_ratio']:.3f} "
              f"(load average {o['machine_load_1min']:.1f} on {o['cores']} cores)")
    for r in result["ledger_in_process"]:
        print(f"in one process, {r['micro_batches']} micro-batches: step CPU with the audit {r['ratio']:.3f}x without, "
              f"hashing {r['hashing_share_of_step']:.1%} of the step ({r['hashed_mb_per_step']:.0f} MB)")
    d = result["digests"]
    print(f"digests on one core: blake3 {d['blake3_gb_s']:.1f} GB/s, blake2b {d['blake2b_gb_s']:.1f} GB/s ({d['ratio']:.1f}x)")
    print(f"final parameters bit-identical: {result['final_parameters_bit_identical']}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", type=Path, default=REPO / "bench" / "results" / "verify.json")
    args = parser.parse_args()
    result = asyncio.run(main(args))
    report(result)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=1) + "\n")
