"""Mixed precision on tiny-gpt: loss after N steps in bf16 and fp16 (dynamic loss scaling) against fp32,
bytes per parameter by category, activation and wire bytes.

Trains in one process through the same code a PNode runs (VNodeRuntime VNode by VNode, VNodeOptimizer
with fp32 masters, the orchestrator's LossScaler for fp16) on byte-level tokens of Tiny Shakespeare
(or stdlib sources), the same batches for every precision; every figure is against fp32's.

    python -m bench.precision [--quick] [--json PATH] [--network PATH] [--steps N] [--batch N]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch

from computeall.network import Graph, load_network
from computeall.orchestrator.loss_scale import LossScaler, uses_dynamic_scaling
from computeall.protocol.config import LossScaleConfig, LrSchedule, OptimizerConfig
from computeall.tensorcore.local_step import local_step
from computeall.tensorcore.optimizer import VNodeOptimizer
from computeall.tensorcore.vnode_runtime import VNodeRuntime
from computeall.tensorcore.tensor_frames import tensor_frames

from .common import REPO, Bench, at_most
from .sessions import corpus


def tokens() -> torch.Tensor:
    data = b"".join(Path(f).read_bytes() for f in corpus())
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


def main() -> int:
    bench = Bench("precision", __doc__, quick_help="fewer steps")
    bench.parser.add_argument("--network", default=str(REPO / "examples" / "networks" / "tiny-gpt.yaml"))
    bench.parser.add_argument("--steps", type=int)
    bench.parser.add_argument("--batch", type=int)
    args = bench.parse()
    steps = args.steps or (10 if args.quick else 60)
    batch = args.batch or 2
    text = Path(args.network).read_text()
    context = load_network(text).context
    data = batches(tokens(), steps, batch, context)
    runs = {p: train(text, p, data) for p in ("fp32", "bf16", "fp16")}
    base = runs["fp32"]
    name = load_network(text).name
    tail = max(1, steps // 10)
    print(f"{name}: {steps} steps of {batch}x{context} tokens; loss = mean of the last {tail} steps")
    for p, r in list(runs.items())[1:]:
        print(f"  {p}: {r['skipped_steps']} steps skipped, final loss scale {r['final_loss_scale']:g}, "
              f"{r['seconds'] / steps:.2f} s/step (fp32 {base['seconds'] / steps:.2f})")
        at = f"{name} in {p}"
        bench.row(f"{at}, loss after {steps} steps", "loss", r["final_loss"], "fp32's", base["final_loss"], at_most(1.02))
        bench.row(f"{at}, activations of a step", "bytes", r["activation_bytes"], "fp32's", base["activation_bytes"],
                  at_most(0.55))
        bench.row(f"{at}, b0.attn's output on the wire", "bytes", r["wire_bytes_b0.attn"], "fp32's",
                  base["wire_bytes_b0.attn"], at_most(0.55))
        held = sum(r[k] for k in ("weights_per_param", "master_per_param", "optimizer_per_param", "gradients_per_param"))
        held32 = sum(base[k] for k in ("weights_per_param", "master_per_param", "optimizer_per_param", "gradients_per_param"))
        bench.row(f"{at}, weights + master + Adam + gradients", "bytes/param", held, "fp32's", held32)
    return bench.finish()


if __name__ == "__main__":
    sys.exit(main())
