"""Mixed precision on tiny-gpt: loss after N steps in bf16 and fp16 (dynamic loss scaling) against fp32,
bytes per parameter by category, activation and wire bytes.

Trains in one process through the same code a PNode runs (VNodeRuntime VNode by VNode, VNodeOptimizer
with fp32 masters, the orchestrator's LossScaler for fp16) on byte-level tokens of Tiny Shakespeare
(or stdlib sources), the same batches for every precision. Prints ratios against fp32 and writes
bench/results/precision.json (`--json PATH` elsewhere). `--quick`: fewer, smaller steps.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from computeall.network import Graph, load_network  # noqa: E402
from computeall.orchestrator.loss_scale import LossScaler, uses_dynamic_scaling  # noqa: E402
from computeall.protocol.config import LossScaleConfig, LrSchedule, OptimizerConfig  # noqa: E402
from computeall.tensorcore.local_step import local_step  # noqa: E402
from computeall.tensorcore.optimizer import VNodeOptimizer  # noqa: E402
from computeall.tensorcore.vnode_runtime import VNodeRuntime  # noqa: E402
from computeall.tensorcore.wire import tensor_frames  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"
SHAKESPEARE = REPO.parent / "shared" / "data" / "tinyshakespeare.txt"


def tokens() -> torch.Tensor:
    if SHAKESPEARE.exists():
        data = SHAKESPEARE.read_bytes()
    else:
        from computeall.cli.default_corpus import stdlib_files

        data = b"".join(Path(f).read_bytes() for f in stdlib_files(1 << 20))
    return torch.frombuffer(bytearray(data), dtype=torch.uint8).long()  # byte-level ids < 256 <= vocab


def batches(ids: torch.Tensor, steps: int, batch: int, context: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    starts = torch.randint(0, ids.numel() - context - 1, (steps, batch), generator=g)
    return [torch.stack([ids[s : s + context + 1] for s in row.tolist()]) for row in starts]


def train(network_text: str, precision: str, data: list[torch.Tensor]) -> dict:
    spec = load_network(network_text)
    for v in spec.vnodes:
        v.precision = precision
    graph = Graph(spec)
    runtime = VNodeRuntime(graph, graph.order, 1, torch.device("cpu"))
    optimizer = VNodeOptimizer(runtime.parameters(), OptimizerConfig(), runtime.decay_groups())
    scaling = LossScaleConfig()
    scaler = LossScaler(scaling, uses_dynamic_scaling(scaling, [precision]))
    schedule = LrSchedule()
    losses, skipped, t0, memory = [], 0, time.perf_counter(), {}
    for step, batch in enumerate(data):
        result = local_step(runtime, [batch], scaler.scale, keep_outputs=True)
        decision = scaler.update(not runtime.grads_finite())
        if step == 0:
            params = runtime.parameters().values()
            n = sum(p.numel() for p in params)
            state = optimizer.state_bytes()
            memory = {
                "params": n,
                "weights_per_param": sum(p.numel() * p.element_size() for p in params) / n,
                "master_per_param": state["master"] / n,
                "optimizer_per_param": state["optimizer"] / n,
                "gradients_per_param": sum(p.grad.numel() * p.grad.element_size() for p in params
                                           if p.grad is not None) / n,
                "activation_bytes": result.activation_bytes,
                "wire_bytes_b0.attn": sum(len(f) for f in tensor_frames("k", result.outputs["b0.attn"], 1 << 22)),
            }
        if decision.apply:
            optimizer.step(schedule.at(step, len(data)), decision.old)
        else:
            skipped += 1
        runtime.zero_grad()
        losses.append(result.loss)
    tail = max(1, len(losses) // 10)
    return {"precision": precision, "losses": losses, "final_loss": sum(losses[-tail:]) / tail,
            "skipped_steps": skipped, "final_loss_scale": scaler.scale,
            "seconds": time.perf_counter() - t0, **memory}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--network", default=str(REPO / "examples" / "networks" / "tiny-gpt.yaml"))
    parser.add_argument("--steps", type=int)
    parser.add_argument("--batch", type=int)
    parser.add_argument("--json", type=Path, default=RESULTS / "precision.json")
    args = parser.parse_args()
    steps = args.steps or (10 if args.quick else 60)
    batch = args.batch or 2
    text = Path(args.network).read_text()
    context = load_network(text).context
    data = batches(tokens(), steps, batch, context)
    runs = {p: train(text, p, data) for p in ("fp32", "bf16", "fp16")}
    base = runs["fp32"]
    name = load_network(text).name
    print(f"{name}: {steps} steps of {batch}x{context} tokens; loss = mean of the last {max(1, steps // 10)} steps")
    print(f"{'precision':<10}{'loss':>8}{'vs fp32':>9}{'skipped':>9}{'scale':>9}{'s/step':>8}"
          f"{'weights':>9}{'master':>8}{'adam':>6}{'grads':>7}{'act MiB':>9}{'act ratio':>10}{'wire ratio':>11}")
    rows = []
    for p, r in runs.items():
        ratio = r["final_loss"] / base["final_loss"]
        act_ratio = r["activation_bytes"] / base["activation_bytes"]
        wire_ratio = r["wire_bytes_b0.attn"] / base["wire_bytes_b0.attn"]
        print(f"{p:<10}{r['final_loss']:>8.4f}{ratio:>9.4f}{r['skipped_steps']:>9}{r['final_loss_scale']:>9.0f}"
              f"{r['seconds'] / steps:>8.2f}{r['weights_per_param']:>9.2f}{r['master_per_param']:>8.2f}"
              f"{r['optimizer_per_param']:>6.2f}{r['gradients_per_param']:>7.2f}"
              f"{r['activation_bytes'] / 2**20:>9.2f}{act_ratio:>10.3f}{wire_ratio:>11.3f}")
        rows.append({"name": name, "precision": p, "steps": steps, "batch": batch, "final_loss": r["final_loss"],
                     "loss_ratio_vs_fp32": ratio, "activation_ratio_vs_fp32": act_ratio,
                     "wire_ratio_vs_fp32": wire_ratio, **{k: v for k, v in r.items() if k != "losses"},
                     "losses": r["losses"]})
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(rows, indent=1) + "\n")
    worst = max(abs(r["final_loss"] / base["final_loss"] - 1) for r in runs.values())
    print(f"worst |loss ratio - 1| = {worst:.4f} (target <= 0.02); results in {args.json}")


if __name__ == "__main__":
    main()
