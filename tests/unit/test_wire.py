"""The tensor wire codec: chunks reassemble exactly; every kind of bad frame is refused with a reason."""

import json
import struct

import pytest
import torch

from computeall.protocol import wire
from computeall.tensorcore.wire import tensor_frames, tensor_from_wire


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


def test_in_flight_tensors_are_bounded():
    r = wire.Reassembler(max_pending=2)
    for key in ("a", "b"):
        r.feed(tensor_frames(key, torch.zeros(4000), wire.MAX_HEADER_BYTES + 64 + 1000)[0])
    with pytest.raises(wire.WireError, match="too many"):
        r.feed(tensor_frames("c", torch.zeros(4000), wire.MAX_HEADER_BYTES + 64 + 1000)[0])
