"""The envelope every command and event travels in.

The envelope's `type` always equals `payload.type`: the payload models form a
discriminated union on that field, so a message parses into exactly one typed
model or is rejected with a reason.
"""

from __future__ import annotations

import time
import uuid
from typing import Generic, TypeVar

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

SCHEMA_VERSION = 1

P = TypeVar("P")


def new_id() -> str:
    return uuid.uuid4().hex


class Envelope(BaseModel, Generic[P]):
    # a diverging run has an infinite or NaN loss: written as Infinity/NaN, so it parses back
    model_config = ConfigDict(extra="forbid", ser_json_inf_nan="constants")

    id: str = Field(default_factory=new_id)
    type: str = ""
    ts: float = Field(default_factory=time.time)
    actor: str = "system"
    session_id: str | None = None
    schema_version: int = Field(SCHEMA_VERSION, description=f"always {SCHEMA_VERSION}; any other version is refused")
    payload: P

    @field_validator("schema_version")
    @classmethod
    def _known_version(cls, version: int) -> int:
        # a message of another version may mean something else by the same fields: refuse it, never guess
        if version != SCHEMA_VERSION:
            raise ValueError(
                f"schema_version {version} is not supported: this system reads schema_version {SCHEMA_VERSION}; "
                "use a client of the same computeall version"
            )
        return version

    @model_validator(mode="after")
    def _type_matches_payload(self) -> "Envelope[P]":
        payload_type = getattr(self.payload, "type", "")
        if not self.type:
            self.type = payload_type
        elif self.type != payload_type:
            raise ValueError(f"envelope type {self.type!r} does not match payload type {payload_type!r}")
        return self
