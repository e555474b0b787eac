"""Dataset service requests on `ca.ds.<verb>` (request/reply, not recorded).

Replies to `batch` are a tensor frame (see `wire`): token ids, shape (B, T+1),
uint16 or uint32. Every other reply is a `DatasetReply` JSON. A failed request
answers `{"ok": false, "error": "..."}`, never silence.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SplitSpec(BaseModel):
    """How a validation split is cut from the corpus: `random-doc:0.1`, `tail:0.05`, `hash-doc:0.1`."""

    model_config = ConfigDict(extra="forbid")

    method: Literal["random-doc", "tail", "hash-doc"] = "random-doc"
    fraction: float = Field(0.1, gt=0, lt=1)
    name: str = "val"

    @classmethod
    def parse(cls, text: str) -> "SplitSpec":
        method, _, fraction = text.partition(":")
        return cls(method=method, fraction=float(fraction or 0.1))


class CreateDataset(_Request):
    """`ca.ds.create`: train (or reuse) a tokenizer, tokenize, cut the splits. Replies when done."""

    name: str = Field(..., pattern=r"^[A-Za-z0-9_-]{1,64}$")
    files: list[str] = Field(..., min_length=1)
    vocab_size: int = Field(4096, ge=257, le=262144)
    split: SplitSpec = Field(default_factory=SplitSpec)
    tokenizer_from: str | None = None
    jsonl_field: str = "text"
    seed: int = 0
    if_exists: Literal["error", "reuse"] = "error"


class GetDataset(_Request):
    """`ca.ds.get`: a dataset's manifest."""

    name: str


class BatchRequest(_Request):
    """`ca.ds.batch`: tokens (B, T+1) for (dataset, split, seed, step, micro): a pure function of these."""

    dataset: str
    split: str = "train"
    seed: int = 0
    step: int = Field(..., ge=0)
    micro: int = Field(0, ge=0)
    batch: int = Field(..., ge=1, le=4096)
    context: int = Field(..., ge=1, le=1 << 20)


class DatasetReply(BaseModel):
    ok: bool
    error: str | None = None
    dataset: dict[str, Any] | None = None  # the manifest: name, vocab_size, documents, splits, shards, digests
    datasets: list[dict[str, Any]] | None = None
