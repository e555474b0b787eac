"""Wire formats: what a remote consumer decodes is bit-for-bit what a local one reads; int8 is
blockwise, bounded in error, a quarter of fp32 on the wire, and lets an overflow through."""

import pytest
import torch

from computeall.protocol import wire
from computeall.tensorcore.tensor_frames import encoded_frames, encoded_from_wire
from computeall.tensorcore.wire_formats import WIRE_FORMATS, wire_format

DTYPES = [torch.float32, torch.bfloat16, torch.float16]


def over_the_wire(encoded, chunk_bytes=1 << 20):
    frames = encoded_frames("k", encoded, chunk_bytes)
    reassembler = wire.Reassembler()
    received = [reassembler.feed(f) for f in frames][-1]
    return encoded_from_wire(received), sum(len(f) for f in frames)


@pytest.mark.parametrize("name", WIRE_FORMATS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_the_remote_consumer_reads_the_local_consumers_bits(name, dtype):
    t = (torch.randn(3, 37, 11, generator=torch.Generator().manual_seed(1)) * 30).to(dtype)
    encoded = wire_format(name).encode(t)
    remote, _ = over_the_wire(encoded, chunk_bytes=wire.MAX_HEADER_BYTES + 700)  # in several frames
    local = encoded.decode()
    assert torch.equal(remote.decode(), local) and remote.decode().dtype == local.dtype
    assert local.shape == t.shape


def test_a_wire_never_widens_and_never_touches_token_ids():
    bf16 = torch.randn(4, 8).bfloat16()
    assert wire_format("fp32").encode(bf16).decode() is bf16
    assert wire_format("fp16").encode(bf16).decode() is bf16  # already 2 bytes: kept as computed
    assert wire_format("bf16").encode(torch.randn(4, 8)).decode().dtype == torch.bfloat16
    ids = torch.arange(10)
    for name in WIRE_FORMATS:
        assert wire_format(name).encode(ids).decode() is ids


def test_int8_is_blockwise_within_half_a_step_of_each_block_and_a_quarter_of_fp32():
    t = torch.randn(8, 64, 256, generator=torch.Generator().manual_seed(2))
    t[0, 0, :128] *= 1000  # one loud block must not drown the quiet ones
    encoded = wire_format("int8").encode(t)
    back = encoded.decode()
    blocks, back_blocks = t.view(-1, wire.INT8_BLOCK), back.view(-1, wire.INT8_BLOCK)
    step = blocks.abs().amax(dim=1, keepdim=True) / 127
    assert ((blocks - back_blocks).abs() <= step / 2 * (1 + 1e-6)).all()
    assert (back_blocks[1:] - blocks[1:]).abs().max() < 0.05  # the quiet blocks keep their resolution
    _, int8_bytes = over_the_wire(encoded)
    _, fp32_bytes = over_the_wire(wire_format("fp32").encode(t))
    assert int8_bytes / fp32_bytes < 0.26


def test_int8_of_zeros_and_of_a_short_last_block():
    zeros = torch.zeros(300)
    assert torch.equal(wire_format("int8").encode(zeros).decode(), zeros)
    t = torch.randn(300)  # 2 full blocks and 44 elements
    encoded = wire_format("int8").encode(t)
    assert encoded.scales.numel() == 3 and encoded.nbytes == 300 + 3 * 4
    assert (encoded.decode() - t).abs().max() <= t.abs().max() / 127


@pytest.mark.parametrize("bad", [float("inf"), float("nan")])
def test_int8_carries_an_overflow_to_the_producer(bad):
    g = torch.randn(1000)
    g[130] = bad
    back = wire_format("int8").encode(g).decode()
    assert not torch.isfinite(back[128:256]).any(), "the overflowed block arrives non-finite: the step is skipped"
    assert torch.isfinite(back[:128]).all() and torch.isfinite(back[256:]).all()


def test_int8_does_not_depend_on_the_thread_count():
    t = torch.randn(16, 256, 256, generator=torch.Generator().manual_seed(3))
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = wire_format("int8").encode(t).decode()
        torch.set_num_threads(max(2, threads))
        many = wire_format("int8").encode(t).decode()
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(one, many)


def test_frames_that_lie_about_int8_are_refused():
    good = encoded_frames("k", wire_format("int8").encode(torch.randn(300)), 1 << 20)[0]
    assert wire.Reassembler().feed(good) is not None
    header_len = int.from_bytes(good[4:8], "little")
    header, body = good[8 : 8 + header_len], good[8 + header_len :]

    def forged(new_header: bytes, new_body: bytes) -> bytes:
        return wire.MAGIC + len(new_header).to_bytes(4, "little") + new_header + new_body

    with pytest.raises(wire.WireError, match=r"\(int8-block\) needs 312 bytes, header says 308"):
        wire.Reassembler().feed(forged(header.replace(b'"total_bytes":312', b'"total_bytes":308'), body[:-4]))
    with pytest.raises(wire.WireError, match="int8-block encodes floating tensors, not int64"):
        wire.Reassembler().feed(forged(header.replace(b'"float32"', b'"int64"'), body))


def test_unknown_wire_formats_are_refused():
    with pytest.raises(ValueError, match="unknown wire format 'int4'; use one of fp32, bf16, fp16, int8"):
        wire_format("int4")
