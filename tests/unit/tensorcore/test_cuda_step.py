"""A training step of the VNode runtime on CUDA, as a PNode on a GPU runs it: the kernels of the table
(Triton attention and head where Triton works), bf16 compute, fp32 masters; against the same step in
fp32 on the CPU."""

import pytest
import torch

from computeall.kernels import attention, lce
from computeall.network import Graph, load_network
from computeall.protocol.config import OptimizerConfig
from computeall.tensorcore.kernel_choice import attention_impl, lce_impl
from computeall.tensorcore.local_step import local_step
from computeall.tensorcore.optimizer import VNodeOptimizer
from computeall.tensorcore.vnode_runtime import VNodeRuntime

from .helpers import TINY

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
CUDA = torch.device("cuda")


def graph(precision: str) -> Graph:
    """The tensorcore tests' tiny GPT at head dim 32 (dim 64, 2 heads): inside the Triton kernel's contract."""
    text = TINY.format(default=precision, embed="", attn="", head="").replace("dim: 32, heads: 2", "dim: 64, heads: 2")
    return Graph(load_network(text))


def step(precision: str, device: torch.device, tokens: torch.Tensor) -> tuple[float, dict[str, torch.Tensor]]:
    g = graph(precision)
    runtime = VNodeRuntime(g, g.order, 5, device)
    optimizer = VNodeOptimizer(runtime.parameters(), OptimizerConfig(), runtime.decay_groups())
    loss = local_step(runtime, [tokens.to(device)]).loss
    optimizer.step(1e-3)
    return loss, {name: p.detach().float().cpu() for name, p in runtime.parameters().items()}


def test_a_bf16_step_on_cuda_runs_the_table_and_matches_fp32_on_the_cpu(monkeypatch):
    calls: list[str] = []
    for table in (attention._FUNCS, lce._FUNCS):
        for name, run in list(table.items()):
            monkeypatch.setitem(table, name, lambda *a, _run=run, _name=name: calls.append(_name) or _run(*a))
    tokens = torch.randint(0, 64, (4, 17), generator=torch.Generator().manual_seed(0))
    loss, weights = step("bf16", CUDA, tokens)
    ran = sorted(set(calls))
    assert ran == sorted({attention_impl(CUDA, 32), lce_impl(CUDA)}), ran
    calls.clear()
    cpu_loss, cpu_weights = step("fp32", torch.device("cpu"), tokens)
    assert abs(loss - cpu_loss) <= 2e-2 * abs(cpu_loss), (loss, cpu_loss)
    for name, w in cpu_weights.items():
        # AdamW's first step moves every weight by about lr (1e-3) along its gradient's sign: where bf16
        # flips a tiny gradient's sign the two differ by 2 lr; bf16 itself rounds the weights to 4e-3 relative
        torch.testing.assert_close(weights[name], w, atol=3e-3, rtol=1e-2, msg=name)
