"""`python -m computeall.dataset --nats URL [--credential FILE] --data-dir DIR [--data-root DIR ...] [--prefix ca]`:
run one dataset service.

It reads paths only inside its data roots: the Python standard library (the demo's corpus) and each
`--data-root`; uploaded files only for their owner's requests that name them.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from pathlib import Path

from computeall.protocol.bus import BusConnectError, add_bus_arguments, connect, credential_from_args, replicas
from computeall.protocol.credentials import CredentialError
from computeall.protocol.data_files import stdlib_root
from computeall.protocol.eventlog import ensure_streams
from computeall.protocol.object_store import dataset_bucket
from computeall.protocol.subjects import Subjects

from .data_roots import DataRoots
from .service import DatasetService
from .store import DatasetStore
from .uploads import UploadCache

log = logging.getLogger("computeall.dataset")

# Object Store chunks well below the default 1 MiB max_payload, big enough for few round trips.
_OBJECT_CHUNK_BYTES = 512 << 10


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m computeall.dataset", description=__doc__)
    add_bus_arguments(parser)
    parser.add_argument("--data-dir", required=True, type=Path, help="where datasets are kept (datasets/<name>/)")
    parser.add_argument("--prefix", default=None, help="subject prefix (default: $COMPUTEALL_PREFIX or ca)")
    parser.add_argument("--bucket", default=None, help="Object Store bucket for shards (default: <prefix>-datasets)")
    parser.add_argument("--data-root", action="append", type=Path, default=[], metavar="DIR",
                        help="also read files under DIR (repeatable); the Python stdlib is always read")
    parser.add_argument("-v", "--verbose", action="store_true")
    return parser.parse_args(argv)


async def serve(args: argparse.Namespace) -> None:
    subjects = Subjects(args.prefix)
    credential = credential_from_args(args, "dataset", "dataset")
    nc = await connect(credential, name="computeall-dataset", max_reconnect_attempts=-1)
    js = nc.jetstream()
    await ensure_streams(js, subjects, replicas=replicas(nc))
    store = DatasetStore(args.data_dir, js, args.bucket or dataset_bucket(subjects), min(_OBJECT_CHUNK_BYTES, nc.max_payload // 2))
    await store.open(replicas(nc))
    uploads = UploadCache(args.data_dir / "uploads", js, subjects, replicas(nc))
    roots = DataRoots([stdlib_root(), *args.data_root])
    service = DatasetService(nc, subjects, store, roots, uploads)
    await service.start()

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    log.info("dataset service ready (data dir %s, bucket %s, data roots %s)", args.data_dir, store.bucket,
             ", ".join(map(str, roots.roots)))
    await stop.wait()
    log.info("stopping")
    await service.stop()
    await nc.drain()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(
        stream=sys.stderr,
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )
    try:
        asyncio.run(serve(args))
    except (BusConnectError, CredentialError) as exc:
        log.error("%s", exc)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
