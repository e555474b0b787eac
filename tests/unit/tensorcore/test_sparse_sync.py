"""diloco's sparse messages against a plain reference: which entries, which signs and magnitudes,
how many bytes; ties, thread counts, error feedback, and messages that must not decode."""

import math

import pytest
import torch
from pydantic import ValidationError

from computeall.protocol.replica_sync import ReplicaSync, SparseCompression
from computeall.tensorcore.sparse_sync import (
    BadMessage, decode, decoded_sum, encode, pack_bits, unpack_bits, with_error_feedback,
)

DEFAULT = SparseCompression()


def reference(flat: torch.Tensor, config: SparseCompression) -> torch.Tensor:
    """What a message must stand for, written plainly: per chunk, the k largest magnitudes (the lower
    place first among equals), in groups by rank, each sent as its group's mean magnitude (bf16) with
    the entry's sign."""
    layout = config.layout(flat.numel())
    out = torch.zeros(layout.chunks * layout.chunk)
    for c in range(layout.chunks):
        chunk = flat[c * layout.chunk: (c + 1) * layout.chunk].tolist()
        chunk += [0.0] * (layout.chunk - len(chunk))
        ranked = sorted(range(layout.chunk), key=lambda i: (-abs(chunk[i]), i))[: layout.k]
        groups = [[i for rank, i in enumerate(ranked) if rank * layout.levels // layout.k == g]
                  for g in range(layout.levels)]
        for group in groups:
            mean = math.fsum(abs(chunk[i]) for i in group) / len(group)
            level = torch.tensor(mean, dtype=torch.float64).to(torch.bfloat16).float().item()
            for i in group:
                out[c * layout.chunk + i] = math.copysign(level, chunk[i])
    return out[: flat.numel()]


@pytest.mark.parametrize("n,config", [
    (5000, DEFAULT),  # a whole chunk and a padded one
    (256, DEFAULT),  # shorter than a chunk: one chunk of 256
    (3000, SparseCompression(top_k=0.1, chunk=1024, bits=3)),
    (7, SparseCompression(top_k=0.5, bits=1)),
])
def test_a_message_carries_the_top_entries_of_each_chunk_in_exactly_its_layouts_bytes(n, config):
    flat = torch.randn(n, generator=torch.Generator().manual_seed(n))
    message = encode(flat, config)
    layout = config.layout(n)
    assert message.dtype == torch.uint8 and message.numel() == layout.message_bytes
    assert torch.equal(decode(message, n, config), reference(flat, config))


def test_the_layout_counts_bytes_as_sparseloco_does():
    layout = DEFAULT.layout(1 << 20)  # tiny-gpt's embedding
    assert (layout.chunk, layout.k, layout.index_bits, layout.levels) == (4096, 64, 12, 2)
    # per chunk: 2 bf16 magnitudes, 64 signs, 64 places of 12 bits
    assert layout.message_bytes == 256 * (4 + 64 // 8 + 64 * 12 // 8)
    assert 4 * (1 << 20) / layout.message_bytes > 150  # 1/64 of the entries at 13.5 bits each, vs 32
    assert DEFAULT.layout(1).message_bytes == 2 + 1  # one chunk of one value: its magnitude and sign


def test_equal_magnitudes_go_to_the_lower_place_and_an_empty_chunk_sends_zeros():
    config = SparseCompression(top_k=2 / 4096)
    flat = torch.zeros(2 * 4096)
    flat[[7, 3, 900]] = torch.tensor([0.5, -0.5, 0.5])
    decoded = decode(encode(flat, config), flat.numel(), config)
    assert decoded.nonzero().flatten().tolist() == [3, 7]
    assert decoded[[3, 7]].tolist() == [-0.5, 0.5]
    assert not decoded[4096:].any()  # the second chunk held only zeros: zeros sent


def test_a_message_has_the_same_bytes_whatever_the_thread_count():
    flat = torch.randn(1 << 20, generator=torch.Generator().manual_seed(1))
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = encode(flat, DEFAULT)
        torch.set_num_threads(max(2, threads))
        many = encode(flat, DEFAULT)
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(one, many)


def test_error_feedback_keeps_exactly_what_the_message_did_not_carry():
    config = SparseCompression(error_decay=0.9)
    g = torch.Generator().manual_seed(2)
    error = torch.randn(5000, generator=g)
    delta = torch.randn(5000, generator=g)
    expected = error * 0.9 + delta
    message = with_error_feedback(delta, error, config)
    assert torch.equal(error, expected - decode(message, 5000, config))
    assert torch.equal(message, encode(expected, config))
    # without error feedback the message is the pseudo-gradient's own
    assert torch.equal(with_error_feedback(delta, None, config), encode(delta, config))


def test_error_feedback_sends_everything_in_the_end():
    """With no decay, what was sent plus what is kept is everything that came in: nothing is lost."""
    config = SparseCompression(error_decay=1.0)
    g = torch.Generator().manual_seed(3)
    error, sent, came = torch.zeros(4096), torch.zeros(4096), torch.zeros(4096)
    for _ in range(20):
        delta = torch.randn(4096, generator=g)
        came += delta
        sent += decode(with_error_feedback(delta, error, config), 4096, config)
    torch.testing.assert_close(sent + error, came, rtol=0, atol=1e-4)


def test_the_replicas_messages_are_added_in_replica_order():
    dense = SparseCompression(top_k=1.0, bits=4)  # every entry sent: every sum has four terms
    g = torch.Generator().manual_seed(4)
    messages = [encode(torch.randn(5000, generator=g) * scale, dense) for scale in (1, 1e7, 1, 1e7)]  # sums round
    decoded = [decode(m, 5000, dense) for m in messages]
    assert torch.equal(decoded_sum(messages, 5000, dense), ((decoded[0] + decoded[1]) + decoded[2]) + decoded[3])
    assert not torch.equal(decoded_sum(messages[::-1], 5000, dense), decoded_sum(messages, 5000, dense)), "order matters"


def test_a_message_that_is_not_one_is_refused_with_the_reason():
    message = encode(torch.randn(5000, generator=torch.Generator().manual_seed(5)), DEFAULT)
    with pytest.raises(BadMessage, match="5000 values is 216 bytes of uint8; this one is 215"):
        decode(message[:-1], 5000, DEFAULT)
    doubled = message.clone()
    layout = DEFAULT.layout(5000)
    places = unpack_bits(message[layout.scale_bytes + layout.sign_bytes:], 12, layout.entries)
    places[1] = places[0]
    doubled[layout.scale_bytes + layout.sign_bytes:] = pack_bits(places, 12)
    with pytest.raises(BadMessage, match="names one place of a chunk twice"):
        decode(doubled, 5000, DEFAULT)
    poisoned = message.clone()
    poisoned[:2] = torch.tensor([0x80, 0x7F], dtype=torch.uint8)  # a bf16 inf
    with pytest.raises(BadMessage, match="non-finite magnitude"):
        decode(poisoned, 5000, DEFAULT)


@pytest.mark.parametrize("width", [1, 5, 12, 16])
def test_bits_pack_and_unpack(width):
    values = torch.randint(0, 1 << width, (999,), generator=torch.Generator().manual_seed(width))
    packed = pack_bits(values, width)
    assert packed.numel() == math.ceil(999 * width / 8)
    assert torch.equal(unpack_bits(packed, width, 999), values)


def test_settings_that_cannot_work_say_why():
    with pytest.raises(ValidationError, match="chunk is 1000; it must be a power of two"):
        SparseCompression(chunk=1000)
    with pytest.raises(ValidationError, match="set sync.mode: diloco"):
        ReplicaSync(compression=SparseCompression())
    with pytest.raises(ValidationError, match="must be below inner_steps"):
        ReplicaSync(mode="diloco", inner_steps=4, overlap_steps=4)
