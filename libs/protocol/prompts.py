"""Text <-> token ids around a generation, the same for `computeall generate` and a session's samples.

Every document in training follows `<|endoftext|>`, so a prompt starts with it too, and generation
stops at the next one. The codec wraps a dataset's `tokenizers.Tokenizer`: the CLI loads it from the
dataset's bucket, the dataset service (which encodes and decodes a session's samples) has it open.
"""

from __future__ import annotations

import json
import re

from .dataset_api import EOT_TOKEN
from .sampling import SamplingConfig


class PromptCodec:
    def __init__(self, tokenizer) -> None:  # a tokenizers.Tokenizer
        self.tokenizer = tokenizer
        self.eot = tokenizer.token_to_id(EOT_TOKEN)

    @classmethod
    def from_json(cls, tokenizer_json: bytes) -> "PromptCodec":
        from tokenizers import Tokenizer  # imported here: only processes that generate need it

        return cls(Tokenizer.from_str(tokenizer_json.decode()))

    def prompt(self, text: str) -> list[int]:
        """The ids a generation continues: a new document, then the text."""
        return ([self.eot] if self.eot is not None else []) + self.tokenizer.encode(text, add_special_tokens=False).ids

    def text(self, ids: list[int]) -> str:
        """What generated ids read as (special tokens left out)."""
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def limits(self, sampling: SamplingConfig) -> SamplingConfig:
        return sampling.for_tokenizer(self.eot, self.tokenizer.get_vocab_size())


# The tokenizer a `transformers` user gets (`export --format hf`) starts every text with the document
# separator too, through a post-processor. It is spliced into the JSON text where the dataset's
# tokenizer says it has none, so that `without_document_start` gives back the very bytes, whose digest
# is the dataset's (`--init-from DIR` checks it): tokenizers write `"post_processor": null` once.
_NO_POST_PROCESSOR = re.compile(rb'("post_processor":\s*)null')


def _document_start(eos_token: str, eos_id: int) -> bytes:
    start = {"type": "TemplateProcessing",
             "single": [{"SpecialToken": {"id": eos_token, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
             "pair": [{"SpecialToken": {"id": eos_token, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                      {"SpecialToken": {"id": eos_token, "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
             "special_tokens": {eos_token: {"id": eos_token, "ids": [eos_id], "tokens": [eos_token]}}}
    return json.dumps(start, separators=(",", ":")).encode()


def starting_documents(tokenizer_json: bytes, eos_token: str, eos_id: int) -> bytes:
    """The tokenizer with a post-processor that starts every text with `eos_token`, as `PromptCodec.prompt`
    does; a tokenizer that has a post-processor of its own is refused (ours never do)."""
    if len(_NO_POST_PROCESSOR.findall(tokenizer_json)) != 1:
        raise ValueError("the tokenizer has a post-processor of its own; computeall's tokenizers have none")
    return _NO_POST_PROCESSOR.sub(lambda m: m.group(1) + _document_start(eos_token, eos_id), tokenizer_json, count=1)


def without_document_start(tokenizer_json: bytes) -> bytes:
    """The dataset's tokenizer as it was before `starting_documents` (any other tokenizer unchanged)."""
    try:
        added = json.loads(tokenizer_json).get("post_processor") or {}
        eos_token = next(iter(added.get("special_tokens", {})))
        eos_id = added["special_tokens"][eos_token]["ids"][0]
    except (ValueError, AttributeError, StopIteration, KeyError, IndexError, TypeError):
        return tokenizer_json
    ours = _document_start(eos_token, eos_id)
    return tokenizer_json.replace(ours, b"null", 1) if tokenizer_json.count(ours) == 1 else tokenizer_json
