"""The manifest of a dataset: everything needed to read, verify and fetch its files, and who may.

It is written last (into a staging folder that is renamed as a whole), so a
dataset with a manifest is complete, and it is the reply of `get`. The files it
names are relative to the dataset's folder and of a fixed form (`shards/<split>-<n>.bin`,
`tokenizer.json`), and every path made from them is confined to that folder too
(`data_roots.confined`), so a forged manifest cannot point the service at another file.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from computeall.protocol.credentials import LOCAL_USER
from computeall.protocol.dataset_api import SplitSpec
from computeall.protocol.dataset_names import DatasetName, SplitName

FORMAT_VERSION = 1
TOKENIZER_FILE = "tokenizer.json"
SHARD_DIR = "shards"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ShardInfo(_Model):
    file: str = Field(..., pattern=rf"^{SHARD_DIR}/[A-Za-z0-9_-]{{1,32}}-[0-9]{{5,9}}\.bin$",
                      description="relative to the dataset folder")
    tokens: int
    bytes: int
    digest: str  # blake2b-128 of the file


class SplitInfo(_Model):
    name: SplitName
    documents: int
    tokens: int
    shards: list[ShardInfo]


class TokenizerInfo(_Model):
    file: Literal["tokenizer.json"] = TOKENIZER_FILE
    digest: str
    vocab_size: int
    eot_id: int
    trained: bool  # False: copied from `tokenizer_from`
    tokenizer_from: str | None = None


class Manifest(_Model):
    format_version: int = FORMAT_VERSION
    name: DatasetName
    owner: str = LOCAL_USER  # who created it (datasets made before they had owners are the local user's)
    public: bool = False  # its owner lets every user read it (`share`)
    created_at: float
    files: list[str]
    documents: int
    text_bytes: int
    vocab_size: int  # the tokenizer's real size (training may stop below the requested size)
    requested_vocab_size: int
    dtype: str  # of the shard files: uint16 when the vocab fits, else uint32
    shard_tokens: int
    split: SplitSpec
    seed: int
    recipe_digest: str  # inputs + settings; `if_exists="reuse"` compares it
    tokenizer: TokenizerInfo
    splits: dict[SplitName, SplitInfo]
    skipped_invalid_utf8: int = 0
    skipped_files: list[str] = []

    def readable_by(self, user: str) -> bool:
        return self.public or user == self.owner

    def files_to_fetch(self) -> list[tuple[str, str]]:
        """(file, digest) of everything besides the manifest."""
        out = [(self.tokenizer.file, self.tokenizer.digest)]
        for split in self.splits.values():
            out.extend((shard.file, shard.digest) for shard in split.shards)
        return out
