"""Cutting the held-out split: every method assigns whole documents, so none is in two splits."""

from __future__ import annotations

import hashlib

import numpy as np

from computeall.protocol.dataset_api import SplitSpec

from .errors import DatasetUserError


def held_out(spec: SplitSpec, lengths: np.ndarray, hash_fractions: np.ndarray | None, seed: int) -> np.ndarray:
    """A boolean per document: True = held out (the `spec.name` split), False = train."""
    n = len(lengths)
    if n < 2:
        raise DatasetUserError(
            f"the corpus has {n} document; a {spec.method} split needs at least 2. Give more files, "
            f"or let plain text split into paragraphs (document unit 'paragraph')"
        )
    if spec.method == "random-doc":
        k = min(n - 1, max(1, round(spec.fraction * n)))
        mask = np.zeros(n, dtype=bool)
        mask[np.random.default_rng([seed % (1 << 64), n]).permutation(n)[:k]] = True
    elif spec.method == "hash-doc":
        assert hash_fractions is not None, "hash-doc needs the documents' hashes"
        mask = hash_fractions < spec.fraction
    else:  # tail: the documents from the first one that starts at or after (1 - fraction) of the tokens
        starts = np.cumsum(lengths) - lengths
        first = int(np.searchsorted(starts, (1 - spec.fraction) * int(lengths.sum()), side="left"))
        mask = np.arange(n) >= min(max(first, 1), n - 1)
    held = int(mask.sum())
    if held == 0 or held == n:
        side = "no" if held == 0 else "every"
        raise DatasetUserError(
            f"the {spec.method}:{spec.fraction} split put {side} document of {n} into '{spec.name}'; "
            f"use a {'larger' if held == 0 else 'smaller'} fraction or random-doc"
        )
    return mask


def hash_fraction(text: str) -> float:
    """A document's stable position in [0, 1): depends only on its text, so it holds as the corpus grows."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little") / float(1 << 64)
