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

    python -m bench.head_fusion [--quick] [--device cpu|cuda] [--json PATH]
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import torch

from computeall.network import Graph, NetworkSpec, load_network, load_network_file
from computeall.network.head_fusion import fuse_heads
from computeall.network.per_head import per_head_gpt
from computeall.protocol.config import OptimizerConfig
from computeall.tensorcore.local_step import local_step
from computeall.tensorcore.optimizer import VNodeOptimizer
from computeall.tensorcore.vnode_runtime import VNodeRuntime

from .common import REPO, Bench, at_most

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
    bench = Bench("head_fusion", __doc__, quick_help="2 blocks, context 64, a few steps: a smoke run")
    bench.parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    bench.parser.add_argument("--heads", type=int, nargs="+", default=[8, 64])
    args = bench.parse()
    device = torch.device(args.device)
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    base = load_network_file(EXAMPLE)
    blocks, context, batch, micro, steps, warmup = (2, 64, 4, 1, 5, 2) if args.quick else (4, base.context, 8, 2, 10, 2)
    print(f"head fusion, all heads on one PNode ({device}; batch {batch} x context {context}, {micro} micro-batch(es), "
          f"{blocks} blocks); VNode calls: forward+backward work items per step on the PNode's compute thread "
          "(+2: optimizer, zero_grad); tensors: activations + gradients handed between VNodes")
    for heads in args.heads:
        unfused = base if (heads == 8 and not args.quick) else with_heads(base, heads, blocks, context)
        fused, lines = fuse_heads(unfused)
        assert all(line.startswith("fused") for line in lines), lines
        u = measure(unfused, device, batch, micro, steps, warmup)
        f = measure(fused, device, batch, micro, steps, warmup)
        assert abs(u["first_loss"] - f["first_loss"]) <= 1e-4 * abs(u["first_loss"]), (u, f)  # same model
        name = f"{heads} heads of {unfused.vnode('b0.h0').params['head_dim']}, fused ({f['vnodes']} VNodes)"
        unfused_is = f"unfused ({u['vnodes']} VNodes)"
        bench.row(name, "s/step", f["step_time_s"], unfused_is, u["step_time_s"], at_most(1.0))
        bench.row(name, "VNode calls/step", f["vnode_calls_per_step"], unfused_is, u["vnode_calls_per_step"])
        bench.row(name, "tensors handed/step", f["tensors_between_vnodes_per_step"], unfused_is,
                  u["tensors_between_vnodes_per_step"])
    return bench.finish()


if __name__ == "__main__":
    sys.exit(main())
