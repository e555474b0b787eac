"""The manifest of a dataset: everything needed to read, verify and fetch its files.

It is written last (into a staging folder that is renamed as a whole), so a
dataset with a manifest is complete, and it is the reply of `ca.ds.get`.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from computeall.protocol.dataset_api import MANIFEST_FILE, SplitSpec

FORMAT_VERSION = 1
TOKENIZER_FILE = "tokenizer.json"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ShardInfo(_Model):
    file: str  # relative to the dataset folder
    tokens: int
    bytes: int
    digest: str  # blake2b-128 of the file


class SplitInfo(_Model):
    name: str
    documents: int
    tokens: int
    shards: list[ShardInfo]


class TokenizerInfo(_Model):
    file: str = TOKENIZER_FILE
    digest: str
    vocab_size: int
    eot_id: int
    trained: bool  # False: copied from `tokenizer_from`
    tokenizer_from: str | None = None


class Manifest(_Model):
    format_version: int = FORMAT_VERSION
    name: str
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
    splits: dict[str, SplitInfo]
    skipped_invalid_utf8: int = 0
    skipped_files: list[str] = []

    def files_to_fetch(self) -> list[tuple[str, str]]:
        """(file, digest) of everything besides the manifest."""
        out = [(self.tokenizer.file, self.tokenizer.digest)]
        for split in self.splits.values():
            out.extend((shard.file, shard.digest) for shard in split.shards)
        return out
