"""How text is drawn from a model: `computeall generate`, and the samples a session records while it trains."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class SamplingConfig(BaseModel):
    """How the next token is drawn from the logits; temperature 0 is greedy. The same seed gives the same text.

    `stop_token` and `vocab_size` come from the tokenizer: a session's samples and `generate`
    fill them in when they are left out.
    """

    model_config = ConfigDict(extra="forbid")

    max_new_tokens: int = Field(64, ge=1)
    temperature: float = Field(1.0, ge=0)
    top_k: int | None = Field(None, ge=1, description="keep only the k most likely tokens")
    top_p: float | None = Field(None, gt=0, le=1, description="keep the smallest set whose probability reaches p")
    seed: int = 0
    stop_token: int | None = Field(None, description="end early after this token (it is returned)")
    vocab_size: int | None = Field(None, ge=1, description="ids from here on have no text (the tokenizer is smaller): never drawn")

    def for_tokenizer(self, eot_id: int | None, vocab_size: int) -> "SamplingConfig":
        """These settings with what the tokenizer decides where they were left out: stop at
        `<|endoftext|>`, never draw an id the tokenizer has no text for."""
        return self.model_copy(update={
            "stop_token": eot_id if self.stop_token is None else self.stop_token,
            "vocab_size": self.vocab_size or vocab_size,
        })
