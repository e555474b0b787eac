"""Building a dataset without NATS: tokenizer round trip, uint32 shards, documents kept whole."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from computeall.dataset import builder, tokenizer as bpe
from computeall.dataset.shards import SplitStream
from computeall.dataset.data_roots import DataRoots
from computeall.dataset.sources import Reader
from computeall.protocol.dataset_api import EOT_TOKEN, MAX_VOCAB, CreateDataset, SplitSpec


def _build(tmp_path: Path, request: CreateDataset):
    reader = Reader(request.jsonl_field, request.document_unit, request.on_invalid_utf8)
    scan = reader.scan(request.files, DataRoots([tmp_path, *(Path(f).parent for f in request.files)]))
    staging = tmp_path / "staging"
    staging.mkdir()
    return builder.build(request, "alice", scan, reader, staging, lambda *a: None).manifest, staging


def test_tokenizer_round_trip_on_real_text(tmp_path, shakespeare):
    manifest, root = _build(tmp_path, CreateDataset(name="s", files=[str(shakespeare)], vocab_size=2000))
    tokenizer = bpe.load(root / manifest.tokenizer.file)
    assert manifest.vocab_size == tokenizer.get_vocab_size() == 2000
    assert manifest.tokenizer.digest == bpe.file_digest(root / "tokenizer.json")
    text = shakespeare.read_text()[:20_000]
    ids = tokenizer.encode(text).ids
    assert tokenizer.decode(ids) == text
    assert len(ids) < len(text.encode()) / 2  # it learned merges
    assert manifest.splits["train"].tokens + manifest.splits["val"].tokens == manifest.documents + sum(
        len(tokenizer.encode(d).ids) for d in Reader().documents(Reader().scan([str(shakespeare)], DataRoots([shakespeare.parent])).files)
    )


@pytest.mark.parametrize("method", ["random-doc", "tail", "hash-doc"])
def test_no_document_in_two_splits(tmp_path, method):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n\n".join(f"doc {i}: " + " ".join(f"w{(i * 7 + j) % 97}" for j in range(i % 13 + 3)) for i in range(400)))
    manifest, root = _build(tmp_path, CreateDataset(name="d", files=[str(corpus)], vocab_size=400, split=SplitSpec(method=method, fraction=0.2)))
    tokenizer = bpe.load(root / "tokenizer.json")
    eot = tokenizer.token_to_id(EOT_TOKEN)
    texts = {}
    for name, split in manifest.splits.items():
        stream = SplitStream(root, split, manifest.dtype).read(0, split.tokens)
        assert stream[-1] == eot  # every split ends on a document boundary
        docs = np.split(stream, np.flatnonzero(stream == eot) + 1)[:-1]
        texts[name] = {tokenizer.decode(d[:-1].tolist()) for d in docs}
        assert len(texts[name]) == split.documents
    assert not texts["train"] & texts["val"]
    assert len(texts["train"]) + len(texts["val"]) == 400


def test_vocab_262144_is_accepted_and_shards_are_uint32(tmp_path):
    rng = np.random.default_rng(0)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    words = ["".join(w) for w in letters[rng.integers(0, 26, size=(60_000, 5))]]  # enough distinct words for > 65,536 merges
    corpus = tmp_path / "words.txt"
    corpus.write_text("\n\n".join(" ".join(words[i : i + 100]) for i in range(0, len(words), 100)))
    manifest, root = _build(tmp_path, CreateDataset(name="big", files=[str(corpus)], vocab_size=MAX_VOCAB))
    assert manifest.requested_vocab_size == 262144
    assert manifest.vocab_size > 65536 and manifest.dtype == "uint32"
    train = SplitStream(root, manifest.splits["train"], manifest.dtype).read(0, manifest.splits["train"].tokens)
    assert train.dtype == np.dtype("<u4") and train.max() > 65535
    with pytest.raises(ValidationError, match="less than or equal to 262144"):
        CreateDataset(name="big", files=["x"], vocab_size=MAX_VOCAB + 1)
