"""The names a dataset request carries, validated where they enter: each is one plain token, so a
name can never walk out of the folder or bucket it names something in (`../x`, `/etc/passwd`).

The dataset service still confines every path it builds from them after resolving links
(`services/dataset/data_roots.confined`): a name that passes here is one safe path component, and
that check catches what lies on disk (a symbolic link out of its root).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import GetCoreSchemaHandler
from pydantic_core import core_schema

MANIFEST_FILE = "manifest.json"  # the dataset service publishes `<dataset>/manifest.json` in its bucket, last
RESERVED_FILE_NAMES = (MANIFEST_FILE,)  # what the service names its own files: never an uploaded file's name


@dataclass(frozen=True)
class OneToken:
    """A str that is one plain token, refused with a message that says what it may be (`pattern` is what
    the protocol reference shows)."""

    what: str
    longest: int

    @property
    def pattern(self) -> str:
        return rf"^[A-Za-z0-9_-]{{1,{self.longest}}}$"

    def check(self, value: str) -> str:
        if not re.fullmatch(self.pattern, value):
            raise ValueError(f"{self.what} {value[:80]!r} is not valid: use 1 to {self.longest} letters, digits, '_' or '-' "
                             "(no dots, slashes or spaces)")
        return value

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> core_schema.CoreSchema:
        return core_schema.no_info_after_validator_function(self.check, handler(source))


DatasetName = Annotated[str, OneToken("dataset name", 64)]
SplitName = Annotated[str, OneToken("split name", 32)]
