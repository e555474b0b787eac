"""The allocator's memory model against what a PNode's work really allocates: tiny-gpt trained for two
steps in one runtime (as one PNode hosting it all), every CPU allocation and free replayed from torch's
profiler for the peak of live tensor bytes, within 15% of `stage_memory_bytes`."""

from pathlib import Path

import pytest
import torch

from computeall.kernels.timing import peak_bytes
from computeall.network import Graph, load_network
from computeall.network.memory_model import StepShape, stage_memory_bytes
from computeall.protocol.config import OptimizerConfig
from computeall.tensorcore.local_step import local_step
from computeall.tensorcore.optimizer import VNodeOptimizer
from computeall.tensorcore.vnode_runtime import VNodeRuntime

TINY = (Path(__file__).parents[3] / "examples" / "networks" / "tiny-gpt.yaml").read_text()


def tiny_gpt(precision: str, recompute: bool) -> Graph:
    text = TINY.replace("precision: fp32", f"precision: {precision}")
    if recompute:
        text = text.replace("\ndefaults:\n", "\ndefaults:\n  recompute: true\n", 1)
    return Graph(load_network(text))


def measured_peak(graph: Graph, shape: StepShape) -> int:
    """Peak live tensor bytes from building the VNodes and their optimizer through two steps (the second
    with the optimizer's state in place)."""
    def work() -> None:
        runtime = VNodeRuntime(graph, graph.order, 0, torch.device("cpu"))
        optimizer = VNodeOptimizer(runtime.parameters(), OptimizerConfig(state=shape.state), runtime.decay_groups())
        for step in range(2):
            g = torch.Generator().manual_seed(step)
            micro = [torch.randint(0, graph.spec.vocab_size, (shape.micro_batch_size, graph.spec.context + 1), generator=g)
                     for _ in range(shape.micro_batches)]
            local_step(runtime, micro)
            optimizer.step(1e-3)
            runtime.zero_grad()

    return peak_bytes(work, torch.device("cpu"))


@pytest.mark.parametrize("precision, state, micro_batch_size, micro_batches, recompute", [
    ("fp32", "fp32", 4, 1, False),
    ("bf16", "fp32", 4, 1, False),
    ("bf16", "int8", 8, 1, False),
    ("bf16", "int8", 4, 2, False),
    ("bf16", "int8", 4, 1, True),
    ("bf16", "int8-sr", 4, 2, False),
])
def test_the_model_is_within_15_percent_of_the_measured_peak(precision, state, micro_batch_size, micro_batches, recompute):
    graph = tiny_gpt(precision, recompute)
    shape = StepShape(micro_batch_size, micro_batches, state)
    measured = measured_peak(graph, shape)
    modelled = stage_memory_bytes(graph, graph.order, shape)
    assert 0.85 <= modelled / measured <= 1.15, f"model {modelled / 2**20:.1f} MiB, measured {measured / 2**20:.1f} MiB"
