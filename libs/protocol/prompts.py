"""Text <-> token ids around a generation, the same for `computeall generate` and a session's samples.

Every document in training follows `<|endoftext|>`, so a prompt starts with it too, and generation
stops at the next one. The tokenizer is a dataset's `tokenizers` JSON; the package is imported
when a codec is made, so a process that never generates never loads it.
"""

from __future__ import annotations

from .dataset_api import EOT_TOKEN
from .sampling import SamplingConfig


class PromptCodec:
    def __init__(self, tokenizer_json: bytes) -> None:
        from tokenizers import Tokenizer

        self.tokenizer = Tokenizer.from_str(tokenizer_json.decode())
        self.eot = self.tokenizer.token_to_id(EOT_TOKEN)

    def prompt(self, text: str) -> list[int]:
        """The ids a generation continues: a new document, then the text."""
        return ([self.eot] if self.eot is not None else []) + self.tokenizer.encode(text, add_special_tokens=False).ids

    def text(self, ids: list[int]) -> str:
        """What generated ids read as (special tokens left out)."""
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def limits(self, sampling: SamplingConfig) -> SamplingConfig:
        """`sampling` with what the tokenizer decides where it was left out: stop at `<|endoftext|>`,
        never draw an id the tokenizer has no text for."""
        return sampling.model_copy(update={
            "stop_token": self.eot if sampling.stop_token is None else sampling.stop_token,
            "vocab_size": sampling.vocab_size or self.tokenizer.get_vocab_size(),
        })
