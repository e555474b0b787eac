"""Text <-> token ids around a generation, the same for `computeall generate` and a session's samples.

Every document in training follows `<|endoftext|>`, so a prompt starts with it too, and generation
stops at the next one. The codec wraps a dataset's `tokenizers.Tokenizer`: the CLI loads it from the
dataset's bucket, the dataset service (which encodes and decodes a session's samples) has it open.
"""

from __future__ import annotations

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
