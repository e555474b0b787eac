"""The fixed table of kernels training runs (`kernel_choice`), and that training runs what it says."""

import pytest
import torch

from computeall.kernels import attention, lce
from computeall.tensorcore import kernel_choice
from computeall.tensorcore.kernel_choice import attention_impl, lce_impl
from computeall.tensorcore.local_step import local_step
from computeall.tensorcore.vnode_runtime import VNodeRuntime

from .helpers import batch, tiny_graph

CPU, CUDA = torch.device("cpu"), torch.device("cuda")  # a device object needs no GPU


@pytest.fixture(autouse=True)
def _no_override(monkeypatch):
    monkeypatch.delenv("COMPUTEALL_TRAIN_ATTENTION", raising=False)
    monkeypatch.delenv("COMPUTEALL_TRAIN_LCE", raising=False)


def triton(monkeypatch, usable: bool) -> None:
    monkeypatch.setattr(kernel_choice, "triton_usable", lambda device: usable and device.type == "cuda")


@pytest.mark.parametrize("usable", [True, False])
def test_the_cpu_runs_torch_sdpa_and_the_chunked_head_whatever_triton_can(monkeypatch, usable):
    triton(monkeypatch, usable)
    assert [attention_impl(CPU, d) for d in (16, 32, 64, 128, 256)] == ["sdpa"] * 5
    assert lce_impl(CPU) == "chunked"


def test_cuda_runs_triton_within_its_head_dims(monkeypatch):
    triton(monkeypatch, True)
    assert {d: attention_impl(CUDA, d) for d in (16, 31, 32, 64, 128, 129)} == {
        16: "sdpa", 31: "sdpa", 32: "triton", 64: "triton", 128: "triton", 129: "sdpa"}
    assert lce_impl(CUDA) == "triton"


def test_cuda_without_triton_runs_torch_sdpa_and_the_chunked_head(monkeypatch):
    triton(monkeypatch, False)
    assert attention_impl(CUDA, 64) == "sdpa" and lce_impl(CUDA) == "chunked"


def test_an_override_replaces_the_table_and_a_wrong_name_says_which_are_right(monkeypatch):
    monkeypatch.setenv("COMPUTEALL_TRAIN_ATTENTION", "tiled")
    monkeypatch.setenv("COMPUTEALL_TRAIN_LCE", "builtin")
    assert attention_impl(CPU, 32) == "tiled" and lce_impl(CPU) == "builtin"
    monkeypatch.setenv("COMPUTEALL_TRAIN_ATTENTION", "fastest")
    with pytest.raises(ValueError, match="COMPUTEALL_TRAIN_ATTENTION='fastest' names no implementation; one of reference, tiled"):
        attention_impl(CPU, 32)


def test_a_training_step_runs_the_implementations_of_the_table(monkeypatch):
    """What bench/kernels.py measures is what the VNode ops call: every attention and head call of a
    step goes to the implementation the table names, and no other."""
    calls: list[str] = []

    def counted(table: dict, name: str):
        run = table[name]
        return lambda *args: calls.append(name) or run(*args)

    for table in (attention._FUNCS, lce._FUNCS):
        for name in list(table):
            monkeypatch.setitem(table, name, counted(table, name))
    graph = tiny_graph()
    local_step(VNodeRuntime(graph, graph.order, 0, CPU), [batch(graph)])
    assert sorted(calls) == sorted([attention_impl(CPU, 16)] * 2 + [lce_impl(CPU)])
