"""Writes docker-compose.yml from `computeall.cli.security.compose` (services, identities, nats config).

    python tools/compose_file.py            # rewrite docker-compose.yml
    python tools/compose_file.py --check    # exit 1 when the committed file is stale
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from computeall.cli.security.compose import compose_file

PATH = Path(__file__).resolve().parents[1] / "docker-compose.yml"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    text = compose_file()
    if args.check:
        if PATH.read_text() != text:
            print(f"{PATH} is stale: run `python tools/compose_file.py`", file=sys.stderr)
            return 1
        return 0
    PATH.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
