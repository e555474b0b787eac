"""Held-out splits: whole documents only, deterministic, stable hash-doc."""

from __future__ import annotations

import numpy as np
import pytest

from computeall.dataset.errors import DatasetUserError
from computeall.dataset.splits import hash_fraction, held_out
from computeall.protocol.dataset_api import SplitSpec

DOCS = [f"document number {i} " * (1 + i % 7) for i in range(500)]
LENGTHS = np.array([len(d.split()) + 1 for d in DOCS])
FRACTIONS = np.array([hash_fraction(d) for d in DOCS])


@pytest.mark.parametrize("method", ["random-doc", "tail", "hash-doc"])
def test_each_document_in_exactly_one_split_and_deterministic(method):
    spec = SplitSpec(method=method, fraction=0.1)
    mask = held_out(spec, LENGTHS, FRACTIONS, seed=7)
    assert mask.dtype == bool and mask.shape == (len(DOCS),)  # one flag per document: never in two splits
    assert 0 < mask.sum() < len(DOCS)
    assert np.array_equal(mask, held_out(spec, LENGTHS, FRACTIONS, seed=7))
    held_tokens = LENGTHS[mask].sum() / LENGTHS.sum()
    assert 0.03 < held_tokens < 0.2


def test_random_doc_depends_on_the_seed_and_tail_is_the_end():
    spec = SplitSpec(method="random-doc", fraction=0.2)
    assert not np.array_equal(held_out(spec, LENGTHS, None, 0), held_out(spec, LENGTHS, None, 1))
    tail = held_out(SplitSpec(method="tail", fraction=0.2), LENGTHS, None, 0)
    first = int(np.argmax(tail))
    assert tail[first:].all() and not tail[:first].any()


def test_hash_doc_is_stable_as_the_corpus_grows():
    spec = SplitSpec(method="hash-doc", fraction=0.2)
    grown = DOCS + [f"a new document {i}" for i in range(100)]
    small = held_out(spec, LENGTHS, FRACTIONS, 0)
    big = held_out(spec, np.ones(len(grown), dtype=int), np.array([hash_fraction(d) for d in grown]), 0)
    assert np.array_equal(small, big[: len(DOCS)])


def test_too_few_documents():
    with pytest.raises(DatasetUserError, match="needs at least 2"):
        held_out(SplitSpec(), np.array([10]), None, 0)
    with pytest.raises(DatasetUserError, match="put no document"):
        held_out(SplitSpec(method="hash-doc", fraction=0.01), np.array([3, 3]), np.array([0.5, 0.6]), 0)


def test_split_spec_parse():
    assert SplitSpec.parse("tail:0.05") == SplitSpec(method="tail", fraction=0.05)
    with pytest.raises(ValueError, match="unknown split method"):
        SplitSpec.parse("last:0.1")
    with pytest.raises(ValueError, match="not a number"):
        SplitSpec.parse("tail:x")
