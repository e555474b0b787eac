"""A dataset being made (`DatasetCreated` comes last), and who may read it."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ..credentials import LOCAL_USER
from .base import DomainEvent, recorded_as


@recorded_as("dataset")
class TokenizerTrained(DomainEvent):
    """A dataset's tokenizer: trained on its corpus, or copied from `tokenizer_from`."""

    type: Literal["TokenizerTrained"] = "TokenizerTrained"
    name: str
    vocab_size: int  # the real size (training may stop below the requested size)
    requested_vocab_size: int
    tokenizer_digest: str
    tokenizer_from: str | None = None
    seconds: float


@recorded_as("dataset")
class Tokenized(DomainEvent):
    type: Literal["Tokenized"] = "Tokenized"
    name: str
    documents: int
    text_bytes: int
    tokens: int
    dtype: str
    skipped_invalid_utf8: int = 0
    seconds: float


@recorded_as("dataset")
class SplitCreated(DomainEvent):
    type: Literal["SplitCreated"] = "SplitCreated"
    name: str
    split: str
    method: str  # random-doc, tail, hash-doc
    documents: int
    tokens: int
    shards: int
    shard_digests: list[str]


@recorded_as("dataset")
class DatasetCreated(DomainEvent):
    """Recorded last: a dataset exists (and is published) once this is in the log."""

    type: Literal["DatasetCreated"] = "DatasetCreated"
    name: str
    files: list[str]
    vocab_size: int
    documents: int
    tokens: int
    tokenizer_digest: str
    dtype: str = "uint16"
    splits: dict[str, int] = Field(default_factory=dict)  # split name -> tokens
    recipe_digest: str = ""
    object_store_bucket: str = ""
    # who asked for it (the user token of the request's subject); datasets made before they had owners are the local user's
    owner: str = LOCAL_USER


@recorded_as("dataset")
class DatasetShared(DomainEvent):
    """Its owner made the dataset public (every user may read it, none may change it) or private again."""

    type: Literal["DatasetShared"] = "DatasetShared"
    name: str
    owner: str
    public: bool
