"""Attention-head fusion: step time of a per-head network, fused against unfused, all heads on one PNode.

For 8 heads (examples/networks/tiny-gpt-heads.yaml: d=256, 8 heads of 32) and 64 heads (the same
network with 64 heads of 4), the whole network sits on one PNode: a `VNodeRuntime` hosting every
VNode, driven like a PNode's stage drives it (every VNode forward and backward is one work item
handed to the PNode's single compute thread, gradients summed in consumer order, then the PNode's
AdamW). The unfused run executes the network as written; the fused run executes it after
`fuse_heads` (one fused_attention_heads VNode per block, all heads in one flash-attention call).

Counted per step: VNode calls (forward + backward work items the PNode dispatches, i.e. the
requests its compute thread serves) and tensors handed between VNodes (activations forward plus
gradients back, per micro-batch). With everything on one PNode no tensor crosses NATS; the
orchestrator sends the same RunStep/ApplyStep to the PNode either way. Were the heads on another
PNode than their input and concat, each of those tensors would be one NATS message (or more chunks).

    python bench/head_fusion.py [--quick] [--device cpu|cuda] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

from computeall.network import Graph, NetworkSpec, load_network, load_network_file
from computeall.network.head_fusion import fuse_heads
from computeall.network.per_head import per_head_gpt
from computeall.protocol.config import OptimizerConfig
from computeall.tensorcore.local_step import local_step
from computeall.tensorcore.optimizer import VNodeOptimizer
from computeall.tensorcore.vnode_runtime import VNodeRuntime

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"
EXAMPLE = REPO / "examples" / "networks" / "tiny-gpt-heads.yaml"


def with_heads(base: NetworkSpec, heads: int, blocks: int, context: int) -> NetworkSpec:
    """The tiny-gpt-heads layout with `heads` heads per block (head_dim = dim / heads) and `blocks` blocks."""
    return load_network(per_head_gpt(
        heads=heads, blocks=blocks, dim=base.vnode("embed").params["dim"], context=context, vocab=base.vocab_size,
        name=f"{base.name}-{heads}h", hidden=base.vnode("b0.mlp").params["hidden"],
    ))


class OnePNode:
    """Every VNode on one PNode; each VNode forward/backward is one work item on the compute thread."""

    def __init__(self, spec: NetworkSpec, device: torch.device, micro_batches: int) -> None:
        self.graph = Graph(spec)
        self.device = device
        self.runtime = VNodeRuntime(self.graph, self.graph.order, 1, device)
        self.optimizer = VNodeOptimizer(self.runtime.parameters(), OptimizerConfig(), self.runtime.decay_groups())
        self.micro_batches = micro_batches
        self.executor = ThreadPoolExecutor(max_workers=1)  # a PNode's one compute thread
        self.calls = self.tensors = 0

    def _call(self, fn, *args):
        return self.executor.submit(fn, *args).result()

    def step(self, batches: list[torch.Tensor]) -> float:
        result = local_step(self.runtime, batches, run=self._call)
        self._call(self.optimizer.step, 1e-3)
        self._call(self.runtime.zero_grad)
        self.calls += result.calls + 2
        self.tensors += result.handoffs
        return result.loss


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure(spec: NetworkSpec, device: torch.device, batch: int, micro: int, steps: int, warmup: int) -> dict:
    pnode = OnePNode(spec, device, micro)
    g = torch.Generator().manual_seed(0)
    times, losses = [], []
    for step in range(warmup + steps):
        batches = [torch.randint(0, spec.vocab_size, (batch // micro, spec.context + 1), generator=g).to(device)
                   for _ in range(micro)]
        if step == warmup:
            pnode.calls = pnode.tensors = 0
        sync(device)
        t0 = time.perf_counter()
        losses.append(pnode.step(batches))
        sync(device)
        times.append(time.perf_counter() - t0)
    pnode.executor.shutdown()
    return {
        "vnodes": len(spec.vnodes),
        "step_time_s": statistics.median(times[warmup:]),
        "vnode_calls_per_step": pnode.calls // steps,
        "tensors_between_vnodes_per_step": pnode.tensors // steps,
        "first_loss": losses[0],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="2 blocks, context 64, a few steps: a smoke run")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--heads", type=int, nargs="+", default=[8, 64])
    ap.add_argument("--json", type=Path, default=RESULTS / "head_fusion.json")
    args = ap.parse_args()
    device = torch.device(args.device)
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    base = load_network_file(EXAMPLE)
    blocks, context, batch, micro, steps, warmup = (2, 64, 4, 1, 5, 2) if args.quick else (4, base.context, 8, 2, 10, 2)

    rows = []
    for heads in args.heads:
        unfused = base if (heads == 8 and not args.quick) else with_heads(base, heads, blocks, context)
        fused, lines = fuse_heads(unfused)
        assert all(line.startswith("fused") for line in lines), lines
        u = measure(unfused, device, batch, micro, steps, warmup)
        f = measure(fused, device, batch, micro, steps, warmup)
        assert abs(u["first_loss"] - f["first_loss"]) <= 1e-4 * abs(u["first_loss"]), (u, f)  # same model
        rows.append({
            "network": unfused.name, "heads": heads, "head_dim": unfused.vnode("b0.h0").params["head_dim"],
            "blocks": blocks, "context": unfused.context, "batch": batch, "micro_batches": micro,
            "device": str(device), "unfused": u, "fused": f,
            "speedup": u["step_time_s"] / f["step_time_s"],
            "counted": "VNode forward+backward calls (+2 optimizer/zero_grad items) dispatched to the PNode's "
                       "compute thread per step; tensors handed between VNodes per step (none crosses NATS: one PNode)",
        })

    print(f"head fusion, all heads on one PNode ({device}, {'quick' if args.quick else 'full'}; "
          f"batch {batch} x context {context}, {micro} micro-batch(es), {blocks} blocks)")
    header = (f"{'heads':>5} {'hd':>3}  {'form':<8}{'VNodes':>7}{'step':>11}{'VNode calls':>13}"
              f"{'tensors':>9}{'speedup':>9}")
    print(header)
    print("-" * len(header))
    for r in rows:
        for form in ("unfused", "fused"):
            x = r[form]
            speed = f"{r['speedup']:.2f}x" if form == "fused" else ""
            print(f"{r['heads']:>5} {r['head_dim']:>3}  {form:<8}{x['vnodes']:>7}{x['step_time_s'] * 1e3:>8.1f} ms"
                  f"{x['vnode_calls_per_step']:>13}{x['tensors_between_vnodes_per_step']:>9}{speed:>9}")
    print("VNode calls: forward+backward work items per step on the PNode's compute thread (+2: optimizer, "
          "zero_grad); tensors: activations + gradients handed between VNodes (all local: 0 NATS messages).")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(rows, indent=1) + "\n")
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
