"""`python -m computeall.monitor --nats URL --data-dir DIR [--host H] [--port P] [--prefix ca]`."""

from __future__ import annotations

import asyncio
import logging
import sys

from .service import Monitor
from .settings import parse_args


def main(argv: list[str] | None = None) -> int:
    settings = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    asyncio.run(Monitor(settings).run())
    return 0


if __name__ == "__main__":
    sys.exit(main())
