"""The command line every generator in tools/ shares: write the file, or `--check` that it is current."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path


def write_or_check(description: str, output: Path, render: Callable[[], str], regenerate: str,
                   argv: list[str] | None = None) -> int:
    """Write `render()` to `output`; with `--check`, exit 1 (saying how to fix it) when the file differs."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--check", action="store_true", help=f"only report whether {output.name} is up to date")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        if output.read_text() != text:
            print(f"{output} is stale: run `{regenerate}`", file=sys.stderr)
            return 1
        return 0
    output.write_text(text)
    return 0
