"""Dataset service requests (request/reply, not recorded), on a subject that says who asks:

    ca.ds.user.<user>.<verb>   a user's request (only that user's credential may publish there; the
                               orchestrator asks on a session owner's subject, for that owner)
    ca.ds.pnode.<pid>.batch    a PNode's batch, for a session whose plan gave it the dataset (`batch_grants`)

Datasets belong to the user who created them: another user may read one only once its owner made it
public (`share`), and only read it. Uploads are each user's own (`object_store.uploads_bucket`).

Replies to `batch` are a tensor frame (see `wire`): token ids, shape (B, T+1),
uint16 or uint32. Every other reply is a `DatasetReply` JSON. A failed request
answers `{"ok": false, "error": "..."}`, never silence.

While `create` runs, the service publishes `DatasetProgress` on
`ca.ds.progress.<user>.<name>` so the user's client can draw progress bars.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from .config import DataConfig
from .dataset_names import DatasetName, SplitName
from .limits import DATA_FILES_PER_REQUEST, UPLOAD_FILE_BYTES
from .responder import Api, Endpoint
from .subjects import Subjects, check_token
from .uploads import SHA256, UploadedFile

BYTE_ALPHABET = 256
EOT_TOKEN = "<|endoftext|>"  # between documents in every token stream
PAD_TOKEN = "<|pad|>"
SPECIAL_TOKENS = [EOT_TOKEN, PAD_TOKEN]
MIN_VOCAB = BYTE_ALPHABET + len(SPECIAL_TOKENS)
MAX_VOCAB = 262144
SPLIT_METHODS = ("random-doc", "tail", "hash-doc")
SESSION_ID = r"^[A-Za-z0-9_-]{1,64}$"


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SplitSpec(BaseModel):
    """How a validation split is cut from the corpus: `random-doc:0.1`, `tail:0.05`, `hash-doc:0.1`.

    Every method cuts between documents, so no document is in two splits.
    """

    model_config = ConfigDict(extra="forbid")

    method: Literal["random-doc", "tail", "hash-doc"] = "random-doc"
    fraction: float = Field(0.1, gt=0, lt=1)
    name: SplitName = "val"

    @field_validator("name")
    @classmethod
    def _not_train(cls, value: str) -> str:
        if value == "train":
            raise ValueError("the held-out split cannot be called 'train'")
        return value

    @classmethod
    def parse(cls, text: str) -> "SplitSpec":
        """`METHOD[:FRACTION]`; raises ValueError naming the accepted forms."""
        method, _, fraction = text.partition(":")
        if method not in SPLIT_METHODS:
            raise ValueError(f"unknown split method {method!r} in {text!r}; use one of {', '.join(SPLIT_METHODS)} (e.g. random-doc:0.1)")
        try:
            value = float(fraction) if fraction else 0.1
        except ValueError:
            raise ValueError(f"split fraction {fraction!r} in {text!r} is not a number (e.g. random-doc:0.1)") from None
        return cls(method=method, fraction=value)


class CreateDataset(_Request):
    """`ca.ds.create`: train (or reuse) a tokenizer, tokenize, cut the splits. Replies when done.

    The corpus is `files` (paths the service reads, inside its data roots) then `uploads`.
    """

    name: DatasetName
    files: list[str] = Field(default_factory=list, description="files or folders on the service's machine, inside its data roots")
    uploads: list[UploadedFile] = Field(default_factory=list, description="files the client put in the uploads bucket")
    vocab_size: int = Field(4096, le=MAX_VOCAB)
    split: SplitSpec = Field(default_factory=SplitSpec)
    tokenizer_from: DatasetName | None = Field(None, description="reuse the tokenizer of this dataset (yours or public) instead of training one")
    tokenizer_file: str | None = Field(None, description="use this tokenizer.json on the service's machine, inside its data roots")
    tokenizer_upload: UploadedFile | None = Field(None, description="use this tokenizer.json the client put in the uploads bucket")
    jsonl_field: str = "text"
    # A plain text file holds many documents separated by blank lines ("paragraph"), or is one ("file").
    document_unit: Literal["paragraph", "file"] = "paragraph"
    on_invalid_utf8: Literal["error", "skip"] = "error"
    seed: int = 0
    shard_tokens: int = Field(1 << 24, ge=1024, description="tokens per shard file (the last one may be shorter)")
    if_exists: Literal["error", "reuse"] = "error"

    @model_validator(mode="after")
    def _some_input(self) -> "CreateDataset":
        if not self.files and not self.uploads:
            raise ValueError("give files or uploads to make the dataset from")
        return self

    @model_validator(mode="after")
    def _one_tokenizer(self) -> "CreateDataset":
        if sum(x is not None for x in (self.tokenizer_from, self.tokenizer_file, self.tokenizer_upload)) > 1:
            raise ValueError("give one tokenizer: a dataset's (tokenizer_from) or a file (tokenizer_file or tokenizer_upload)")
        return self

    @field_validator("vocab_size")
    @classmethod
    def _vocab_covers_bytes(cls, value: int) -> int:
        if value < MIN_VOCAB:
            raise ValueError(
                f"vocab size {value} is below the byte alphabet: a byte-level BPE needs at least {MIN_VOCAB} "
                f"({BYTE_ALPHABET} bytes + {len(SPECIAL_TOKENS)} special tokens)"
            )
        return value


class LocalFile(BaseModel):
    """A file as the client sees it: where, and what is in it."""

    model_config = ConfigDict(extra="forbid")

    path: str = Field(..., min_length=1)
    sha256: str = Field(..., pattern=SHA256)
    size: int = Field(..., ge=0, le=UPLOAD_FILE_BYTES)


class LocateFiles(_Request):
    """`ca.ds.locate`: which of these files the service reads as they are (the same path holds the
    same bytes there, inside its data roots). The client uploads the others. Replies `readable`."""

    files: list[LocalFile] = Field(..., min_length=1, max_length=DATA_FILES_PER_REQUEST)


class CheckData(_Request):
    """`check`: whether a session's data can be prepared, looked at without preparing it: the dataset is
    there, the asker may read it and it has the split; every file is inside the data roots and there;
    every upload is complete in the asker's uploads bucket (or fetched already). Nothing is read or
    fetched but names, sizes and the uploads' small records. Replies ok, or the first problem."""

    data: DataConfig


class GetDataset(_Request):
    """`get`: a dataset's manifest (yours or public)."""

    name: DatasetName


class ListDatasets(_Request):
    """`list`: the manifests of your datasets and of the public ones."""


class ShareDataset(_Request):
    """`share`: make your dataset public (every user may read it, none may change it) or private again."""

    name: DatasetName
    public: bool


class OpenUploads(_Request):
    """`uploads`: your uploads bucket, created on first use; replies its name (`bucket`). Only the dataset
    service creates buckets: a user may put objects into theirs, never set up a stream."""


class BatchRequest(_Request):
    """`batch`: tokens (B, T+1) for (dataset, split, seed, step, micro): a pure function of these.

    Sample `b` of the batch is sample ((step * micro_batches) + micro) * batch + b of the
    split's seeded order of non-overlapping windows, so no window repeats inside an epoch.
    A PNode names the session whose plan gave it the dataset; a user reads their own or public ones.
    """

    dataset: DatasetName
    session_id: str | None = Field(None, pattern=SESSION_ID, description="a PNode's: the session it reads for")
    split: SplitName = "train"
    seed: int = 0
    step: int = Field(..., ge=0)
    micro: int = Field(0, ge=0)
    micro_batches: int = Field(1, ge=1)
    batch: int = Field(..., ge=1, le=4096)
    context: int = Field(..., ge=1, le=1 << 20)

    @model_validator(mode="after")
    def _micro_in_range(self) -> "BatchRequest":
        if self.micro >= self.micro_batches:
            raise ValueError(f"micro {self.micro} is out of range for micro_batches {self.micro_batches}")
        return self


class SampleRequest(_Request):
    """`sample`: the decoded text of the first `n` samples of a real batch (step 0)."""

    dataset: DatasetName
    split: SplitName = "val"
    n: int = Field(2, ge=1, le=64)
    context: int = Field(128, ge=1, le=1 << 16)
    seed: int = 0


class EncodePrompts(_Request):
    """`encode`: texts -> the token ids a generation continues (see `protocol.prompts`), with the
    dataset's end-of-text id and vocabulary size, which bound what generation may draw."""

    dataset: DatasetName
    texts: list[Annotated[str, Field(max_length=10_000)]] = Field(..., min_length=1, max_length=64)


class DecodeTokens(_Request):
    """`decode`: generated token ids -> their text (special tokens left out)."""

    dataset: DatasetName
    tokens: list[Annotated[list[int], Field(max_length=1 << 16)]] = Field(..., min_length=1, max_length=64)


class DatasetProgress(BaseModel):
    """Progress of one stage of a create: `done` of `total` `unit`s."""

    name: DatasetName
    stage: Literal["scan", "train-tokenizer", "tokenize", "write-splits", "publish"]
    done: int
    total: int
    unit: str = "B"


class DatasetReply(BaseModel):
    ok: bool
    error: str | None = None
    transient: bool = False  # the bus failed the service mid-request (a failover): nothing is wrong with it, ask again
    dataset: dict[str, Any] | None = None  # the manifest: name, vocab_size, documents, splits, shards, digests
    datasets: list[dict[str, Any]] | None = None
    samples: list[str] | None = None
    readable: list[str] | None = None  # the paths of a `locate` the service reads as they are
    tokens: list[list[int]] | None = None  # encode
    texts: list[str] | None = None  # decode
    eot_id: int | None = None  # encode
    vocab_size: int | None = None  # encode
    bucket: str | None = None  # uploads: the caller's uploads bucket


# -- subjects: who asks is in the subject ------------------------------------------------------
USER = "user"
PNODE = "pnode"
PNODE_VERB = "batch"  # the one request a PNode makes


def user_subject(subjects: Subjects, user: str, verb: str) -> str:
    """Where `user` asks for `verb`: only that user's credential (and the orchestrator, for a session's
    owner) may publish there."""
    return f"{subjects.prefix}.ds.{USER}.{check_token(user, 'user name')}.{check_token(verb, 'dataset verb')}"


def pnode_batch_subject(subjects: Subjects, pnode: str) -> str:
    return f"{subjects.prefix}.ds.{PNODE}.{check_token(pnode, 'pnode id')}.{PNODE_VERB}"


def user_requests(subjects: Subjects, user: str = "*", verb: str = "*") -> str:
    """A user's requests (every user's: what the dataset service subscribes to, per verb)."""
    return f"{subjects.prefix}.ds.{USER}.{user}.{verb}"


def pnode_requests(subjects: Subjects) -> str:
    return f"{subjects.prefix}.ds.{PNODE}.*.{PNODE_VERB}"


def progress_subject(subjects: Subjects, user: str, name: str) -> str:
    """Progress of `user`'s create of dataset `name`: only that user may subscribe."""
    return f"{subjects.prefix}.ds.progress.{check_token(user, 'user name')}.{check_token(name, 'dataset name')}"


def progress_all(subjects: Subjects, user: str = "*") -> str:
    """The progress of a user's creates (of every user's: what the dataset service publishes)."""
    return f"{subjects.prefix}.ds.progress.{user}.*"


@dataclass(frozen=True)
class Requester:
    """Who sent a dataset request, read from its subject (never from a field)."""

    kind: Literal["user", "pnode"]
    name: str
    verb: str


def requester_of(subjects: Subjects, subject: str) -> Requester:
    """The sender of a request on `user_subject` or `pnode_batch_subject`; ValueError for any other subject."""
    prefix = f"{subjects.prefix}.ds."
    tokens = subject[len(prefix):].split(".") if subject.startswith(prefix) else []
    if len(tokens) == 3 and tokens[0] in (USER, PNODE) and (tokens[0] == USER or tokens[2] == PNODE_VERB):
        return Requester(tokens[0], tokens[1], tokens[2])
    raise ValueError(f"{subject} is not a dataset request subject of prefix {subjects.prefix}")


API: Api[Requester] = Api("the dataset service", DatasetReply, (  # who asks: the user or PNode of the subject
    Endpoint("create", CreateDataset, "train a tokenizer, tokenize, cut splits; replies when done"),
    Endpoint("get", GetDataset, "a dataset's manifest (the user's own, or a public one)"),
    Endpoint("check", CheckData, "whether a session's data could be prepared (the orchestrator asks at create, as the "
             "session's owner)"),
    Endpoint("list", ListDatasets, "the manifests of the user's datasets and the public ones"),
    Endpoint("share", ShareDataset, "make one's dataset public (read only for everyone else), or private"),
    Endpoint(PNODE_VERB, BatchRequest, "one batch of token ids, as a tensor frame; a PNode asks on its own subject, for "
             "a session whose grant names it (`ca-batch-grants`)"),
    Endpoint("sample", SampleRequest, "decoded text of a few samples"),
    Endpoint("locate", LocateFiles, "which files the service reads as they are (the client uploads the rest)"),
    Endpoint("uploads", OpenUploads, "the user's uploads bucket, created on first use"),
    Endpoint("encode", EncodePrompts, "prompts as the token ids a generation continues"),
    Endpoint("decode", DecodeTokens, "generated token ids as text"),
), listen=lambda subjects, verb: (user_requests(subjects, verb=verb), *((pnode_requests(subjects),) if verb == PNODE_VERB else ())),
   asker=lambda subjects, subject, inbox: requester_of(subjects, subject))


def session_dataset(data: DataConfig, vocab_size: int, owner: str) -> str:
    """The dataset a session trains on: the one it names, else the one made from its files for its owner."""
    return data.dataset or files_dataset_name(data, vocab_size, owner)


def files_dataset_name(data: DataConfig, vocab_size: int, owner: str) -> str:
    """The dataset a session on plain files trains on: a stable name for 'these files with this vocabulary,
    for this owner', so a rerun reuses the dataset and a client finds the session's tokenizer. The owner
    is part of it: two users training on the same files each get their own dataset."""
    names = sorted(str(Path(f).resolve()) for f in data.files)
    names += sorted(f"upload:{u.sha256}:{u.name}" for u in data.uploads)
    key = "\n".join(names) + f"\n{vocab_size}\nowner:{owner}"
    return "files-" + hashlib.blake2b(key.encode(), digest_size=6).hexdigest()
