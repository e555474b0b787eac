"""`replay rebuild`: drop every projected row and project the log again from its start.

Users and API keys are not in the log and are kept. The same code serves a running monitor
(asked over NATS) and an offline rebuild of the file when no monitor runs.
"""

from __future__ import annotations

from pathlib import Path

from nats.js.errors import NotFoundError

from computeall.protocol import bus
from computeall.protocol.credentials import Credential
from computeall.protocol.eventlog import ensure_streams
from computeall.protocol.monitor_api import MonitorReply
from computeall.protocol.subjects import LOG_STREAM, TEL_STREAM, Subjects

from . import reads, store
from .db import Database
from .ingest import Ingestor
from .pubsub import PubSub

CATCH_UP_TIMEOUT_S = 3600.0


async def rebuild(db: Database, ingestor: Ingestor) -> MonitorReply:
    await ingestor.stop()
    await db.write(store.reset_projection)
    ingestor.stats.positions = {}
    # the targets are read before consuming starts, so a busy log cannot keep the rebuild going
    targets = {}
    for stream in (LOG_STREAM, TEL_STREAM):
        try:
            targets[stream] = (await ingestor.js.stream_info(stream)).state.last_seq
        except NotFoundError:
            targets[stream] = 0
    await ingestor.start()
    for stream, seq in targets.items():
        await ingestor.wait_for(stream, seq, CATCH_UP_TIMEOUT_S)
    stats = await db.read(reads.stats)
    return MonitorReply(events=stats["events"], positions=stats["positions"])


async def rebuild_offline(credential: Credential, data_dir: Path, prefix: str | None = None) -> MonitorReply:
    """Rebuild `DATA_DIR/monitor.duckdb` without a running monitor (it must not be running), as
    the monitor's identity `credential`."""
    nc = await bus.connect(credential, name="computeall-rebuild", connect_timeout=5, max_reconnect_attempts=3)
    try:
        js = nc.jetstream()
        subjects = Subjects(prefix)
        await ensure_streams(js, subjects, replicas=bus.replicas(nc))
        db = Database(data_dir / "monitor.duckdb")
        ingestor = Ingestor(db, nc, js, subjects, PubSub())
        try:
            return await rebuild(db, ingestor)
        finally:
            await ingestor.stop()
            db.close()
    finally:
        await nc.close()
