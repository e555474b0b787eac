"""Batches as a pure function of (split tokens, seed, step, micro, micro_batches, batch, context).

A split's token stream is cut into W non-overlapping windows of context+1 tokens.
Global sample i = ((step * micro_batches) + micro) * batch + b lives in epoch i // W
at position i % W of that epoch's seeded permutation of the windows, so no window
repeats inside an epoch. Each epoch also shifts the window grid by a seeded offset
into the tokens that do not fill a whole window, so later epochs see other cuts.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from computeall.protocol.dataset_api import BatchRequest

from .errors import DatasetUserError
from .shards import SplitStream


@lru_cache(maxsize=16)
def _epoch_order(windows: int, slack: int, seed: int, epoch: int) -> tuple[np.ndarray, int]:
    rng = np.random.default_rng([seed % (1 << 64), epoch])
    return rng.permutation(windows), int(rng.integers(0, slack + 1))


def window_starts(tokens: int, request: BatchRequest, split_label: str) -> np.ndarray:
    """Start offsets of the request's `batch` windows in the split's token stream."""
    window = request.context + 1
    windows = tokens // window
    if windows == 0:
        raise DatasetUserError(
            f"split {split_label} has {tokens} tokens, fewer than one window of context+1 = {window}; "
            f"use a smaller context or a larger split"
        )
    first = ((request.step * request.micro_batches) + request.micro) * request.batch
    out = np.empty(request.batch, dtype=np.int64)
    for b in range(request.batch):
        epoch, position = divmod(first + b, windows)
        order, shift = _epoch_order(windows, tokens - windows * window, request.seed, epoch)
        out[b] = shift + int(order[position]) * window
    return out


def make_batch(stream: SplitStream, request: BatchRequest, split_label: str) -> np.ndarray:
    """Token ids shaped (batch, context+1) in the stream's dtype."""
    starts = window_starts(stream.tokens, request, split_label)
    window = request.context + 1
    out = np.empty((request.batch, window), dtype=stream.dtype)
    for row, start in enumerate(starts):
        out[row] = stream.read(int(start), window)
    return out
