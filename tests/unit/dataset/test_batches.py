"""Batches: a pure function of the request, no window twice in an epoch, reads across shard files."""

from __future__ import annotations

import numpy as np
import pytest

from computeall.dataset.batches import make_batch, window_starts
from computeall.dataset.errors import DatasetUserError
from computeall.dataset.manifest import SplitInfo
from computeall.dataset.shards import ShardWriter, SplitStream
from computeall.protocol.dataset_api import BatchRequest


def _stream(tmp_path, tokens: np.ndarray, shard_tokens: int) -> SplitStream:
    writer = ShardWriter(tmp_path, "train", "uint16", shard_tokens)
    for piece in np.array_split(tokens, 7):  # writes that do not line up with shard ends
        writer.write(piece)
    shards = writer.close()
    assert [s.tokens for s in shards[:-1]] == [shard_tokens] * (len(shards) - 1)
    return SplitStream(tmp_path, SplitInfo(name="train", documents=1, tokens=len(tokens), shards=shards), "uint16")


def test_stream_reads_across_shards(tmp_path):
    tokens = np.arange(10_000, dtype=np.uint16)
    stream = _stream(tmp_path, tokens, 1024)
    assert stream.tokens == 10_000
    assert np.array_equal(stream.read(1000, 3000), tokens[1000:4000])
    with pytest.raises(IndexError):
        stream.read(9_990, 20)


def test_no_window_repeats_inside_an_epoch_and_batches_are_pure(tmp_path):
    stream = _stream(tmp_path, np.arange(20_000, dtype=np.uint16), 4096)
    windows = 20_000 // 33
    seen = []
    steps = windows // (2 * 5)
    for step in range(steps):
        for micro in range(2):
            request = BatchRequest(dataset="d", seed=1, step=step, micro=micro, micro_batches=2, batch=5, context=32)
            seen.extend(window_starts(stream.tokens, request, "d/train").tolist())
            batch = make_batch(stream, request, "d/train")
            assert batch.shape == (5, 33)
            assert np.array_equal(batch[:, 0].astype(np.int64), window_starts(stream.tokens, request, "d/train"))
            assert np.all(np.diff(batch.astype(np.int64), axis=1) == 1)  # real contiguous windows
    assert len(seen) == len(set(seen))
    assert len({s % 33 for s in seen}) == 1  # a grid of non-overlapping windows

    again = BatchRequest(dataset="d", seed=1, step=3, micro=1, micro_batches=2, batch=5, context=32)
    assert np.array_equal(make_batch(stream, again, "x"), make_batch(stream, again, "x"))
    other_seed = again.model_copy(update={"seed": 2})
    assert not np.array_equal(make_batch(stream, again, "x"), make_batch(stream, other_seed, "x"))


def test_split_smaller_than_one_window(tmp_path):
    stream = _stream(tmp_path, np.arange(2000, dtype=np.uint16), 1024)
    with pytest.raises(DatasetUserError, match=r"split d/val has 2000 tokens, fewer than one window of context\+1 = 4097"):
        make_batch(stream, BatchRequest(dataset="d", step=0, batch=1, context=4096), "d/val")


def test_micro_must_be_below_micro_batches():
    with pytest.raises(ValueError, match="micro 2 is out of range"):
        BatchRequest(dataset="d", step=0, micro=2, micro_batches=2, batch=1, context=8)
