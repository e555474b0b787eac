"""The events that record a dataset's creation, in order: TokenizerTrained, Tokenized, one SplitCreated
per split, then DatasetCreated, which marks the dataset complete (a reader that sees no DatasetCreated
knows the creation did not finish)."""

from __future__ import annotations

from computeall.protocol.events import DatasetCreated, SplitCreated, Tokenized, TokenizerTrained

from .builder import BuildResult
from .manifest import Manifest


def creation_events(manifest: Manifest, result: BuildResult, bucket: str) -> list[TokenizerTrained | Tokenized | SplitCreated | DatasetCreated]:
    tokens = sum(s.tokens for s in manifest.splits.values())
    return [
        TokenizerTrained(
            name=manifest.name,
            vocab_size=manifest.vocab_size,
            requested_vocab_size=manifest.requested_vocab_size,
            tokenizer_digest=manifest.tokenizer.digest,
            tokenizer_from=manifest.tokenizer.tokenizer_from,
            seconds=result.train_seconds,
        ),
        Tokenized(
            name=manifest.name,
            documents=manifest.documents,
            text_bytes=manifest.text_bytes,
            tokens=tokens,
            dtype=manifest.dtype,
            skipped_invalid_utf8=manifest.skipped_invalid_utf8,
            seconds=result.tokenize_seconds,
        ),
        *(
            SplitCreated(
                name=manifest.name,
                split=s.name,
                method="rest" if s.name == "train" else manifest.split.method,
                documents=s.documents,
                tokens=s.tokens,
                shards=len(s.shards),
                shard_digests=[shard.digest for shard in s.shards],
            )
            for s in manifest.splits.values()
        ),
        DatasetCreated(
            name=manifest.name,
            files=manifest.files,
            vocab_size=manifest.vocab_size,
            documents=manifest.documents,
            tokens=tokens,
            tokenizer_digest=manifest.tokenizer.digest,
            dtype=manifest.dtype,
            splits={s.name: s.tokens for s in manifest.splits.values()},
            recipe_digest=manifest.recipe_digest,
            object_store_bucket=bucket,
            owner=manifest.owner,
        ),
    ]
