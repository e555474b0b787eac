"""Secrets never go on a command line: every user of a machine sees every process's argv (`ps`,
`/proc/<pid>/cmdline`). A token is read from a file, from stdin or from the environment (which only
the process's owner may read), and the processes `up` starts inherit none of those variables.

One `SecretArg` per kind of token gives a command the three ways, the same everywhere:

    --join-file PATH      the token in a file (`-`: stdin)
    --join -              stdin (the flag of the old `--join TOKEN`: any other value is refused, unread)
    $COMPUTEALL_JOIN_TOKEN
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from .limits import SECRET_INPUT_BYTES

STDIN = "-"


class SecretArgError(ValueError):
    """A token that could not be read; the message says from where and what to do."""


@dataclass(frozen=True)
class SecretArg:
    name: str  # the flags are --<name> and --<name>-file
    env: str
    what: str  # what the token is, for messages

    @property
    def flag(self) -> str:
        return f"--{self.name}"

    @property
    def dest(self) -> str:
        return self.name.replace("-", "_")

    def ways(self) -> str:
        return f"{self.flag}-file PATH, {self.flag} - (stdin) or ${self.env}"

    def add_to(self, container: argparse._ActionsContainer, help: str) -> None:
        """`--<name> -` and `--<name>-file PATH` on `container` (a parser or a group), both naming
        where the token is: `args.<name>` is a path, `-`, or None (then the environment says)."""
        container.add_argument(self.flag, dest=self.dest, metavar="-", default=None, type=self._stdin_only,
                               help=f"{help}, read from stdin (or: {self.flag}-file PATH, ${self.env})")
        container.add_argument(f"{self.flag}-file", dest=self.dest, metavar="PATH", default=None,
                               help=f"{help}, read from this file (`-`: stdin)")

    def _stdin_only(self, value: str) -> str:
        if value != STDIN:
            # the value is not echoed: it is the secret
            raise argparse.ArgumentTypeError(
                f"the {self.what} goes in a file, stdin or the environment, never on the command line, where "
                f"every user of this machine can read it (`ps`); pass {self.ways()}")
        return value

    def given(self, source: str | None) -> bool:
        """Whether a token was passed at all (by a flag or the environment)."""
        return source is not None or self.env in os.environ

    def read(self, source: str | None, stdin: IO[str] | None = None) -> str | None:
        """The token from `source` (a path, or `-` for stdin), else from the environment; None when
        neither holds one. At most `SECRET_INPUT_BYTES` are read."""
        if source is None:
            value, origin = os.environ.get(self.env), f"${self.env}"
            if value is not None and len(value) > SECRET_INPUT_BYTES:
                raise SecretArgError(f"${self.env} is over {SECRET_INPUT_BYTES:,} bytes: it holds no {self.what}")
        elif source == STDIN:
            value, origin = _bounded((stdin or sys.stdin), "stdin", self.what), "stdin"
        else:
            try:
                with open(Path(source), encoding="utf-8") as f:
                    value, origin = _bounded(f, source, self.what), source
            except (OSError, UnicodeDecodeError) as exc:
                raise SecretArgError(f"cannot read the {self.what} from {source}: {exc}") from None
        if value is None:
            return None
        if not value.strip():
            raise SecretArgError(f"{origin} holds no {self.what}")
        return value.strip()


def _bounded(stream: IO[str], origin: str, what: str) -> str:
    text = stream.read(SECRET_INPUT_BYTES + 1)
    if len(text) > SECRET_INPUT_BYTES:
        raise SecretArgError(f"{origin} is over {SECRET_INPUT_BYTES:,} bytes: it holds no {what}")
    return text


JOIN = SecretArg("join", "COMPUTEALL_JOIN_TOKEN", "invite token of `computeall invite pnode`")
LEAF = SecretArg("leaf", "COMPUTEALL_LEAF_TOKEN", "invite token of `computeall invite leaf`")
BUS = SecretArg("join-bus", "COMPUTEALL_BUS_TOKEN", "invite token of `computeall invite server`")
SECRETS = (JOIN, LEAF, BUS)


def without_secrets(environ: dict[str, str]) -> dict[str, str]:
    """`environ` for a child process: none of the tokens' variables (a child is given its own credential)."""
    return {k: v for k, v in environ.items() if k not in {s.env for s in SECRETS}}
