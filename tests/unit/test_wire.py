"""The tensor wire codec: chunks reassemble exactly; every kind of bad frame is refused with a reason."""

import json
import struct

import pytest
import torch

from computeall.protocol import wire
from computeall.tensorcore.tensor_frames import tensor_frames, tensor_from_wire


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.int64])
def test_round_trip_in_chunks_keeps_dtype_and_bits(dtype):
    t = (torch.randn(3, 37, 11) * 100).to(dtype)
    frames = tensor_frames("k", t, chunk_bytes=wire.MAX_HEADER_BYTES + 64 + 500)
    assert len(frames) > 1
    r = wire.Reassembler()
    results = [r.feed(f) for f in reversed(frames)]  # any arrival order
    assert results[:-1] == [None] * (len(frames) - 1)
    back = tensor_from_wire(results[-1])
    assert back.dtype == dtype and torch.equal(back, t)


def test_meta_travels_with_the_tensor():
    frames = tensor_frames("k", torch.ones(2), 1 << 20, meta={"step": 3, "kind": "act"})
    assert wire.Reassembler().feed(frames[0]).meta == {"step": 3, "kind": "act"}


def test_garbage_truncated_and_bad_headers_are_rejected():
    good = tensor_frames("k", torch.arange(10, dtype=torch.float32), 1 << 20)[0]
    r = wire.Reassembler()
    with pytest.raises(wire.WireError, match="bad magic"):
        r.feed(b"hello world")
    with pytest.raises(wire.WireError, match="truncated"):
        r.feed(good[:-4])
    with pytest.raises(wire.WireError, match="out of range"):
        r.feed(good[:8] + b"{")  # header length beyond the frame
    header_len = struct.unpack("<I", good[4:8])[0]
    header, body = json.loads(good[8 : 8 + header_len]), good[8 + header_len :]
    for field, value, reason in [
        ("dtype", "complex128", "dtype"),
        ("shape", [10, 10], "needs"),
        ("chunk", 5, "out of range"),
        ("total_bytes", 1 << 40, "needs"),
    ]:
        bad = dict(header, **{field: value})
        raw = json.dumps(bad).encode()
        frame = wire.MAGIC + struct.pack("<I", len(raw)) + raw + body
        with pytest.raises(wire.WireError, match=reason):
            r.feed(frame)


def test_wrong_digest_is_detected_after_reassembly():
    frame = bytearray(tensor_frames("k", torch.arange(10, dtype=torch.float32), 1 << 20)[0])
    frame[-1] ^= 0xFF  # flip bits of the payload
    with pytest.raises(wire.WireError, match="digest"):
        wire.Reassembler().feed(bytes(frame))


def test_oversized_tensor_is_refused_before_buffering():
    frame = tensor_frames("k", torch.zeros(1000), 1 << 20)[0]
    with pytest.raises(wire.WireError, match="exceeds"):
        wire.Reassembler(max_tensor_bytes=100).feed(frame)


def test_in_flight_tensors_are_bounded_per_sender_and_the_oldest_gives_way():
    small = wire.MAX_HEADER_BYTES + 64 + 1000
    frames = {key: tensor_frames(key, torch.full((4000,), float(n)), small) for n, key in enumerate("abc")}
    r = wire.Reassembler(max_pending=2)
    r.feed(frames["a"][0], sender="p")
    r.feed(frames["a"][0], sender="q")
    r.feed(frames["b"][0], sender="p")
    r.feed(frames["c"][0], sender="p")
    assert r.pending("p") == ["b", "c"], "the sender's oldest unfinished tensor made way for its newest"
    assert r.pending("q") == ["a"], "another sender's tensor under the same key is untouched"
    for frame in frames["b"][1:-1]:
        assert r.feed(frame, sender="p") is None
    assert torch.equal(tensor_from_wire(r.feed(frames["b"][-1], sender="p")), torch.full((4000,), 1.0))


def test_a_sender_cannot_complete_or_spoil_another_senders_tensor():
    """Chunk 0 of a tensor from a squatter, under the key the genuine sender uses: the genuine chunks still
    make the genuine tensor, and the squatter's chunk never mixes into it."""
    small = wire.MAX_HEADER_BYTES + 64 + 1000
    genuine = tensor_frames("k", torch.arange(1000, dtype=torch.float32), small)
    squatted = tensor_frames("k", torch.zeros(2000), small)
    r = wire.Reassembler()
    assert r.feed(squatted[0], sender="rogue") is None
    results = [r.feed(frame, sender="producer") for frame in genuine]
    assert results[:-1] == [None] * (len(genuine) - 1)
    assert torch.equal(tensor_from_wire(results[-1]), torch.arange(1000, dtype=torch.float32))
    assert r.pending("rogue") == ["k"] and r.pending("producer") == []


def test_a_senders_newer_tensor_replaces_the_one_it_left_unfinished():
    small = wire.MAX_HEADER_BYTES + 64 + 1000
    lost = tensor_frames("k", torch.zeros(1000), small)
    again = tensor_frames("k", torch.ones(1000), small)
    r = wire.Reassembler()
    r.feed(lost[0], sender="p")
    results = [r.feed(frame, sender="p") for frame in again]
    assert torch.equal(tensor_from_wire(results[-1]), torch.ones(1000))
