"""safetensors written and read a tensor at a time: the package's own bytes, every write and read one
tensor's at most, and a damaged file refused with what is wrong before anything is allocated."""

from __future__ import annotations

import io
import json
import struct

import pytest
import torch
from safetensors.torch import load as load_tensors
from safetensors.torch import save as save_tensors

from computeall.protocol.config import OptimizerConfig
from computeall.tensorcore.checkpoint import write_vnode
from computeall.tensorcore.optimizer import VNodeOptimizer
from computeall.tensorcore.safetensors_stream import SafetensorsError, SafetensorsFile, write
from computeall.tensorcore.vnode_runtime import VNodeRuntime

from .helpers import tiny_graph
from .test_optimizer import _train


def tensors() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return {
        "w.bf16": torch.randn(3, 4, generator=g).bfloat16(), "a": torch.randn(5, generator=g),
        "codes": torch.randint(-128, 127, (7,), generator=g, dtype=torch.int8), "u": torch.arange(9, dtype=torch.uint8),
        "low": torch.arange(6, dtype=torch.int16).view(2, 3), "half": torch.randn(2, generator=g).half(),
        "step": torch.tensor(3.0), "count": torch.tensor([7], dtype=torch.int64), "empty": torch.zeros(0, 3),
        "flag": torch.tensor([True, False]), "wide": torch.randn(2, generator=g).double(),
    }


@pytest.mark.parametrize("metadata", [None, {"vnode": "b0.mlp"}])
def test_the_bytes_are_the_safetensors_packages_own(metadata):
    out = io.BytesIO()
    size = write(out, tensors(), metadata)
    assert out.getvalue() == save_tensors(tensors(), metadata=metadata) and size == len(out.getvalue())


def test_a_file_reads_back_the_same_tensors_whoever_wrote_it():
    for data in (save_tensors(tensors(), metadata={"k": "v"}), _written(tensors())):
        read = SafetensorsFile(io.BytesIO(data))
        assert sorted(read) == sorted(tensors()) and read.metadata in ({"k": "v"}, {})
        for name, t in tensors().items():
            assert read[name].dtype == t.dtype and torch.equal(read[name], t), name
    assert all(torch.equal(t, tensors()[k]) for k, t in load_tensors(_written(tensors())).items())


def _written(ts: dict[str, torch.Tensor]) -> bytes:
    out = io.BytesIO()
    write(out, ts)
    return out.getvalue()


class _Counting(io.BytesIO):
    """Records the size of every write and every read."""

    def __init__(self, data: bytes = b"") -> None:
        super().__init__(data)
        self.writes: list[int] = []
        self.reads: list[int] = []

    def write(self, data) -> int:
        self.writes.append(memoryview(data).nbytes)
        return super().write(data)

    def read(self, n: int = -1) -> bytes:
        data = super().read(n)
        self.reads.append(len(data))
        return data

    def readinto(self, buffer) -> int:
        n = super().readinto(buffer)
        self.reads.append(n)
        return n


def test_a_vnode_is_written_and_read_one_tensor_at_a_time():
    """A checkpoint of a trained VNode: no write is larger than its largest tensor (the object is never
    whole in memory), and looking up one tensor reads the header and that tensor only."""
    graph = tiny_graph("bf16")
    runtime = VNodeRuntime(graph, graph.order, 0, torch.device("cpu"))
    optimizer = VNodeOptimizer(runtime.parameters(), OptimizerConfig(state="int8"), runtime.decay_groups())
    _train(graph, runtime, optimizer, 1)
    out = _Counting()
    size = write_vnode(out, runtime, optimizer, "b0.mlp")
    read = SafetensorsFile(io.BytesIO(out.getvalue()))
    largest = max(read[name].numel() * read[name].element_size() for name in read)
    header = 8 + struct.unpack("<Q", out.getvalue()[:8])[0]
    assert size == len(out.getvalue()) == sum(out.writes) > 2 * largest
    assert max(out.writes[2:]) == largest and out.writes[:2] == [8, header - 8]

    source = _Counting(out.getvalue())
    lazy = SafetensorsFile(source)
    before = sum(source.reads)
    weight = lazy["param/b0.mlp.down.weight"]
    assert before == header and sum(source.reads) - before == weight.numel() * weight.element_size()


def _file(header: dict, data: bytes = b"", length: int | None = None) -> io.BytesIO:
    encoded = json.dumps(header).encode()
    return io.BytesIO(struct.pack("<Q", len(encoded) if length is None else length) + encoded + data)


@pytest.mark.parametrize("damaged, says", [
    (io.BytesIO(b"abc"), "too few"),
    (_file({}, length=1 << 40), "header says it is 1099511627776 bytes long"),
    (_file({"x": {"dtype": "F32", "shape": [2]}}), "not a dtype, a shape and two data offsets"),
    (_file({"x": {"dtype": "Q9", "shape": [2], "data_offsets": [0, 8]}}, bytes(8)), "not a dtype"),
    (_file({"x": {"dtype": "F32", "shape": [-2, -2], "data_offsets": [0, 16]}}, bytes(16)), "negative dimension"),
    (_file({"x": {"dtype": "F32", "shape": [1 << 30, 1 << 30], "data_offsets": [0, 8]}}, bytes(8)), "lies at [0, 8) of 8 bytes"),
    (_file({"x": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}, bytes(8)), "lies at [0, 16) of 8 bytes"),
    (_file(["not", "an", "object"]), "not a JSON object"),
    (io.BytesIO(struct.pack("<Q", 4) + b"\xff{]x"), "not JSON"),
])
def test_a_damaged_file_is_refused_before_anything_is_allocated(damaged, says):
    with pytest.raises(SafetensorsError) as refused:
        SafetensorsFile(damaged)
    assert says in str(refused.value)
