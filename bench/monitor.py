"""Monitor benchmark: projection throughput and GraphQL latency, against their anchors.

1. Ingest: StepCompleted events in CA_LOG (a real nats-server) projected into DuckDB by the
   monitor's own consumer, in events/s, against DuckDB's own bulk insert of the same rows
   (events and steps, prebuilt in memory) into empty tables.
2. Query: p50/p95 of `session { steps(maxPoints: 1000) }` over real HTTP on a real monitor
   process, for a session of 100,000 steps, against the same percentiles of the smallest query
   (`monitor { positions }`) on the same server, interleaved: what downsampling 100,000 steps adds.

    python -m bench.monitor [--quick] [--json PATH]
"""

from __future__ import annotations

import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from computeall.cli.nats_server import EmbeddedNats
from computeall.protocol import bus
from computeall.monitor import store
from computeall.monitor.db import Database
from computeall.monitor.ingest import Ingestor
from computeall.monitor.projector import STEP_COLUMNS, Message, project
from computeall.monitor.pubsub import PubSub
from computeall.monitor.step_metrics import STEP_FIELDS
from computeall.protocol.config import DataConfig, SessionConfig
from computeall.protocol.eventlog import ensure_streams
from computeall.protocol.events import EventEnvelope, SessionCreated, StepCompleted
from computeall.protocol.subjects import LOG_STREAM, Subjects

from .common import Bench, at_least, at_most

SESSION = "bench"
QUERY_STEPS = 100_000
QUERY = f'{{ session(id: "{SESSION}") {{ steps(maxPoints: 1000) {{ step loss stepTimeS }} }} }}'
SMALLEST = "{ monitor { positions } }"


def events(n: int) -> list[EventEnvelope]:
    config = SessionConfig(network_yaml="name: bench\n", data=DataConfig(files=["a"]), steps=QUERY_STEPS)
    out = [EventEnvelope(session_id=SESSION, payload=SessionCreated(config=config, owner="local"))]
    for i in range(n - 1):
        loss = 4.0 / (1 + i / 1000) + (0.5 if i % 997 == 0 else 0.0)
        out.append(EventEnvelope(session_id=SESSION, payload=StepCompleted(
            step=i, loss=loss, tokens=4096, step_time_s=0.05 + (i % 13) * 1e-3, lr=1e-3)))
    return out


async def publish(server: EmbeddedNats, envs: list[EventEnvelope]) -> tuple[int, list[Message]]:
    nc = await bus.connect(server.credential("orchestrator"), name="bench-monitor-publish")
    s = Subjects()
    js = nc.jetstream()
    await ensure_streams(js, s)
    futures, messages = [], []
    for env in envs:
        subject, data = s.session_evt(SESSION, env.type), env.model_dump_json().encode()
        futures.append(await js.publish_async(subject, data))
        messages.append(Message(LOG_STREAM, 0, subject, data))
    await js.publish_async_completed()
    for msg, fut in zip(messages, futures):
        msg.seq = fut.result().seq
    await nc.close()
    return messages[-1].seq, messages


async def ingest(server: EmbeddedNats, db: Database, last: int) -> float:
    nc = await bus.connect(server.credential("monitor"), name="bench-monitor-ingest")
    ingestor = Ingestor(db, nc, nc.jetstream(), Subjects(), PubSub())
    start = time.perf_counter()
    await ingestor.start()
    await ingestor.wait_for(LOG_STREAM, last, timeout=600)
    elapsed = time.perf_counter() - start
    await ingestor.stop()
    await nc.close()
    return elapsed


def bulk_anchor(path: Path, messages: list[Message]) -> float:
    """DuckDB's own bulk insert of the rows the projector produced, timed alone."""
    batch = project(messages)
    db = Database(path)
    start = time.perf_counter()
    db.transaction(lambda con: (
        db.insert(con, "events", store.EVENT_COLUMNS, batch.events),
        db.insert(con, "steps", STEP_COLUMNS, batch.steps.values()),
    ))
    elapsed = time.perf_counter() - start
    db.close()
    return elapsed


def extend_session(db: Database, first: int) -> None:
    """Fill the session up to QUERY_STEPS steps without NATS (the quick run ingests fewer), row by row as
    the projector makes them (the session, the step, when it was recorded, the other metrics)."""
    def row(i: int) -> tuple:
        p = StepCompleted(step=i, loss=4.0 / (1 + i / 1000), tokens=4096, step_time_s=0.05, lr=1e-3)
        return (SESSION, i, float(i), *(getattr(p, name) for name in STEP_FIELDS[2:]))

    rows = [row(i) for i in range(first, QUERY_STEPS)]
    db.transaction(lambda con: db.insert(con, "steps", STEP_COLUMNS, rows))


def query_latency(server: EmbeddedNats, data_dir: Path, n: int) -> dict[str, list[float]]:
    """Milliseconds of each query over HTTP, the steps query and the smallest one in turn."""
    monitor = subprocess.Popen(
        [sys.executable, "-m", "computeall.monitor", "--credential", str(server.credential_file("monitor")),
         "--local-key-file", str(server.local_api_key_file()), "--data-dir", str(data_dir)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        address = data_dir / "monitor.json"
        while not address.exists():
            if monitor.poll() is not None:
                raise RuntimeError("the monitor did not start")
            time.sleep(0.05)
        base = json.loads(address.read_text())["url"]
        key = server.security.local_api_key()
        timings: dict[str, list[float]] = {QUERY: [], SMALLEST: []}
        with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=30) as client:
            for i in range(n + 5):
                for query, took in timings.items():
                    start = time.perf_counter()
                    response = client.post("/graphql", json={"query": query})
                    elapsed = time.perf_counter() - start
                    body = response.json()
                    assert response.status_code == 200 and not body.get("errors"), body
                    if query == QUERY:
                        assert 500 <= len(body["data"]["session"]["steps"]["step"]) <= 1000
                    if i >= 5:  # warm-up: first reader cursors, code paths
                        took.append(elapsed * 1000)
        return timings
    finally:
        monitor.terminate()
        monitor.wait(15)


def p95(ms: list[float]) -> float:
    return statistics.quantiles(ms, n=20)[18]


def main() -> int:
    bench = Bench("monitor", __doc__, quick_help="20,000 events and 50 queries instead of 100,000 and 300")
    args = bench.parse()
    n_events, n_queries = (20_000, 50) if args.quick else (QUERY_STEPS + 1, 300)

    with tempfile.TemporaryDirectory() as tmp, EmbeddedNats(Path(tmp) / "nats") as server:
        root = Path(tmp)
        envs = events(n_events)
        t = time.perf_counter()
        last, messages = asyncio.run(publish(server, envs))
        print(f"published {len(envs)} events in {time.perf_counter() - t:.1f}s")

        data_dir = root / "data"
        data_dir.mkdir()
        db = Database(data_dir / "monitor.duckdb")
        ingest_s = asyncio.run(ingest(server, db, last))
        extend_session(db, n_events - 1)
        db.close()
        anchor_s = bulk_anchor(root / "anchor.duckdb", messages)
        timings = query_latency(server, data_dir, n_queries)

    # the projector commits its stream position with the rows, batch by batch: it may take ten times
    # a bare bulk insert of the same rows, no more
    bench.row(f"ingest {n_events} StepCompleted from CA_LOG into DuckDB", "events/s", n_events / ingest_s,
              "DuckDB's bulk insert of the same rows", n_events / anchor_s, at_least(0.1))
    steps, smallest = timings[QUERY], timings[SMALLEST]
    name = f"steps(maxPoints: 1000) of {QUERY_STEPS:,} steps over HTTP"
    bench.row(f"{name}, p50", "ms", statistics.median(steps), "monitor { positions }, p50", statistics.median(smallest))
    bench.row(f"{name}, p95", "ms", p95(steps), "monitor { positions }, p95", p95(smallest), at_most(10.0))
    return bench.finish()


if __name__ == "__main__":
    sys.exit(main())
