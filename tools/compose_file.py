"""Writes docker-compose.yml from `computeall.cli.security.compose` (services, identities, nats config).

    python tools/compose_file.py            # rewrite docker-compose.yml
    python tools/compose_file.py --check    # exit 1 when the committed file is stale
"""

from __future__ import annotations

import sys
from pathlib import Path

from generated_file import write_or_check

from computeall.cli.security.compose import compose_file

PATH = Path(__file__).resolve().parents[1] / "docker-compose.yml"


def main(argv: list[str] | None = None) -> int:
    return write_or_check(__doc__.splitlines()[0], PATH, compose_file, "python tools/compose_file.py", argv)


if __name__ == "__main__":
    sys.exit(main())
