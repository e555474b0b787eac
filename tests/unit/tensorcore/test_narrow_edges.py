"""A learned bottleneck's narrow edge: the int8 wire keeps each token to itself, the two halves start as a
low-rank identity path, generation and validation read what training read, and the Llama export says why it
refuses."""

import pytest
import torch

from computeall.network import Graph, load_network
from computeall.protocol import wire
from computeall.tensorcore.generation import Generator, KVCache
from computeall.tensorcore.hf_export import ExportError, llama_layout
from computeall.tensorcore.local_step import local_step, local_validation
from computeall.tensorcore.ops.bottleneck import BottleneckDown, BottleneckUp
from computeall.tensorcore.trained_model import TrainedModel, inference_network
from computeall.tensorcore.vnode_runtime import VNodeRuntime
from computeall.tensorcore.tensor_frames import encoded_frames, encoded_from_wire
from computeall.tensorcore.wire_formats import wire_format

from .trained import checkpoint, network_yaml

INT8 = wire_format("int8")


def test_int8_blocks_never_span_two_tokens():
    # a rank-8 edge: 16 tokens would share a 128-element block; a later token must not move an earlier one
    z = torch.randn(2, 32, 8, generator=torch.Generator().manual_seed(0))
    louder = z.clone()
    louder[:, 5:] *= 1000
    assert torch.equal(INT8.encode(louder).decode()[:, :5], INT8.encode(z).decode()[:, :5])
    # and each token keeps a resolution of its own: within half a step of its own absmax
    back = INT8.encode(z).decode()
    assert ((back - z).abs() <= z.abs().amax(dim=-1, keepdim=True) / 254 * (1 + 1e-6)).all()


def test_a_narrow_int8_edge_costs_a_scale_per_token_and_arrives_as_it_left():
    z = torch.randn(2, 64, 8, generator=torch.Generator().manual_seed(1))
    encoded = INT8.encode(z)
    assert encoded.encoding == "int8-block" and encoded.scales.numel() == 2 * 64
    assert encoded.nbytes == wire.encoded_bytes("int8-block", "float32", z.shape) == 2 * 64 * (8 + 4)
    frames = encoded_frames("k", encoded, wire.MAX_HEADER_BYTES + 300)  # in several frames
    assembler = wire.Reassembler()
    received = [t for f in frames if (t := assembler.feed(f)) is not None]
    assert len(frames) > 1 and torch.equal(encoded_from_wire(received[0]).decode(), encoded.decode())


def test_int8_keeps_rows_too_narrow_to_gain_as_they_are():
    for t in (torch.randn(10, 1), torch.randn(10, 4).bfloat16(), torch.randn(())):
        assert INT8.encode(t).encoding == "raw" and INT8.encode(t).decode() is t


@pytest.mark.parametrize("dim, rank", [(256, 8), (10, 4), (7, 7)])
def test_the_halves_start_as_a_low_rank_identity_path(dim, rank):
    down, up = BottleneckDown(dim, rank), BottleneckUp(dim, rank)
    for half in (down, up):
        half.reset_parameters(torch.Generator().manual_seed(0))
    z = torch.randn(3, rank, dtype=torch.float64)
    x = torch.randn(3, dim, dtype=torch.float64)
    down, up = down.double(), up.double()
    with torch.no_grad():
        assert torch.allclose(down(up(z)), z)  # what crosses comes back whole
        kept = up(down(x))
        assert torch.allclose(up(down(kept)), kept)  # a projection: keeping twice is keeping once
        assert torch.allclose(((x - kept) * kept).sum(-1), torch.zeros(3, dtype=torch.float64), atol=1e-5)  # orthogonal
        if rank == dim:
            assert torch.allclose(kept, x)


def wan_yaml() -> str:
    return network_yaml("tiny-gpt-wan").replace("context: 256", "context: 32").replace("dim: 256", "dim: 32") \
        .replace("hidden: 688", "hidden: 48").replace("heads: 8", "heads: 2").replace("rank: 16", "rank: 4")


def wired_logits(runtime, tokens: torch.Tensor) -> torch.Tensor:
    """Logits by the training modules over the whole sequence, every edge through its wire format."""
    graph, values = runtime.graph, {"data.tokens": tokens}
    with torch.no_grad():
        for vid in graph.order:
            spec, module = graph.vnodes[vid], runtime.modules[vid]
            if graph.op(vid).is_loss:
                return values[spec.inputs[0]] @ module.weight.T
            values[vid] = wire_format(graph.wire(vid)).encode(module(*(values[i] for i in spec.inputs))).decode()
    raise AssertionError("no loss VNode")


def test_generation_of_a_bottlenecked_network_reads_its_narrow_edge_as_training_did():
    yaml = wan_yaml()
    runtime, objects = checkpoint(yaml)
    generator = Generator(TrainedModel.from_checkpoint(yaml, objects))
    tokens = torch.randint(0, 4096, (1, 20), generator=torch.Generator().manual_seed(0))
    expected = wired_logits(runtime, tokens)
    cache = KVCache(generator.context)
    pieces = [generator.forward(tokens[:, :12], cache)] + [generator.forward(tokens[:, i : i + 1], cache) for i in range(12, 20)]
    assert torch.allclose(torch.cat(pieces, dim=1), expected, atol=1e-5, rtol=0)


def test_the_llama_export_refuses_a_bottleneck_and_says_why():
    with pytest.raises(ExportError, match=r"^VNode cut\.down \(bottleneck_down\) does not map onto a Llama model") as refused:
        llama_layout(inference_network(network_yaml("tiny-gpt-wan")))
    assert "can only add to the residual stream" in str(refused.value)
    assert "tiny-gpt for tiny-gpt-wan" in str(refused.value)  # what to do instead


def test_a_validation_pass_is_the_training_forward_and_keeps_nothing():
    graph = Graph(load_network(wan_yaml()))
    runtime = VNodeRuntime(graph, graph.order, 0, torch.device("cpu"))
    micro_batches = list(torch.randint(0, 4096, (4, 33), generator=torch.Generator().manual_seed(0)).split(2))
    validated = local_validation(runtime, micro_batches)
    assert runtime.activation_bytes() == 0
    assert validated.loss == local_step(runtime, micro_batches).loss
