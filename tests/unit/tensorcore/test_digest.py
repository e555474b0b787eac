"""Spot-check digests: a tensor that arrived raw has the digest of the tensor itself, taken from the
digest the wire verified, and the digest covers dtype and shape as well as the bytes."""

import pytest
import torch

from computeall.protocol import wire
from computeall.tensorcore.digest import received_digest, tensor_digest, tensors_digest
from computeall.tensorcore.tensor_frames import encoded_frames, tensor_frames, tensor_from_wire
from computeall.tensorcore.wire_formats import wire_format


def through_the_wire(frames: list[bytes]) -> wire.Tensor:
    reassembler = wire.Reassembler()
    received = [reassembler.feed(f) for f in frames]
    assert received[-1] is not None and all(r is None for r in received[:-1])
    return received[-1]


def test_a_received_tensor_has_the_digest_of_what_it_decodes_to():
    t = torch.randn(64, 300)
    received = through_the_wire(tensor_frames("k", t, 16 << 10))  # several chunks
    assert received_digest(received) == tensor_digest(tensor_from_wire(received)) == tensor_digest(t)


def test_the_digest_covers_dtype_and_shape():
    t = torch.randn(6, 4)
    digests = {tensor_digest(t), tensor_digest(t.view(4, 6)), tensor_digest(t.view(torch.int32)), tensor_digest(t.clone())}
    assert len(digests) == 3  # the same bits in the same dtype and shape digest alike
    assert tensors_digest([t, None]) != tensors_digest([None, t])


def test_an_encoded_tensor_is_hashed_not_taken_from_the_wire():
    t = torch.randn(4, 256)
    received = through_the_wire(encoded_frames("k", wire_format("int8").encode(t), 1 << 20))
    with pytest.raises(ValueError, match="did not arrive raw"):
        received_digest(received)
