"""`python -m computeall.monitor --nats URL --data-dir DIR [--host H] [--port P] [--prefix ca]`."""

from __future__ import annotations

import asyncio
import logging
import sys

from .migrate import SchemaError
from .service import Monitor
from .settings import parse_args


def main(argv: list[str] | None = None) -> int:
    settings = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        asyncio.run(Monitor(settings).run())
    except SchemaError as exc:  # the database file is not one this build can use: say why, no traceback
        print(f"computeall monitor: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
