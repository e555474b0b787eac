"""Monitor benchmark: projection throughput and GraphQL latency, against their anchors.

1. Ingest: StepCompleted events in CA_LOG (a real nats-server) projected into DuckDB by the
   monitor's own consumer, in events/s, against DuckDB's own bulk insert of the same rows
   (events and steps, prebuilt in memory) into empty tables. Target >= 20,000 events/s.
2. Query: p50/p95 of `session { steps(maxPoints: 1000) }` over real HTTP on a real monitor
   process, for a session of 100,000 steps. Target p95 <= 50 ms.

    .venv/bin/python bench/monitor.py [--quick]      # writes bench/results/monitor.json
"""

from __future__ import annotations

import argparse
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
from computeall.protocol.config import DataConfig, SessionConfig
from computeall.protocol.eventlog import ensure_streams
from computeall.protocol.events import EventEnvelope, SessionCreated, StepCompleted
from computeall.protocol.subjects import LOG_STREAM, Subjects

SESSION = "bench"
QUERY_STEPS = 100_000
INGEST_TARGET = 20_000.0
P95_TARGET_MS = 50.0
QUERY = f'{{ session(id: "{SESSION}") {{ steps(maxPoints: 1000) {{ step loss stepTimeS }} }} }}'


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
    """Fill the session up to QUERY_STEPS steps without NATS (the quick run ingests fewer)."""
    rows = [(SESSION, i, float(i), 4.0 / (1 + i / 1000), 4096, 0.05, 1e-3, 1.0, 0.0, 0.0) for i in range(first, QUERY_STEPS)]
    db.transaction(lambda con: db.insert(con, "steps", STEP_COLUMNS, rows))


def query_latency(server: EmbeddedNats, data_dir: Path, n: int) -> list[float]:
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
        timings = []
        with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=30) as client:
            for i in range(n + 5):
                start = time.perf_counter()
                response = client.post("/graphql", json={"query": QUERY})
                elapsed = time.perf_counter() - start
                body = response.json()
                assert response.status_code == 200 and not body.get("errors"), body
                assert 500 <= len(body["data"]["session"]["steps"]["step"]) <= 1000
                if i >= 5:  # warm-up: first reader cursors, code paths
                    timings.append(elapsed * 1000)
        return timings
    finally:
        monitor.terminate()
        monitor.wait(15)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="20,000 events and 50 queries instead of 100,000 and 300")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "monitor.json")
    args = parser.parse_args()
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

    rate, anchor_rate = n_events / ingest_s, n_events / anchor_s
    p50 = statistics.median(timings)
    p95 = statistics.quantiles(timings, n=20)[18]
    result = {
        "quick": args.quick,
        "events": n_events,
        "ingest_events_per_s": round(rate),
        "duckdb_bulk_insert_rows_per_s": round(anchor_rate),
        "ingest_vs_bulk_insert": round(rate / anchor_rate, 3),
        "ingest_target_per_s": INGEST_TARGET,
        "ingest_vs_target": round(rate / INGEST_TARGET, 2),
        "query_steps": QUERY_STEPS,
        "query_p50_ms": round(p50, 2),
        "query_p95_ms": round(p95, 2),
        "query_p95_target_ms": P95_TARGET_MS,
        "query_target_vs_p95": round(P95_TARGET_MS / p95, 2),
    }
    print(f"ingest: {rate:,.0f} events/s  (DuckDB bulk insert of the same rows: {anchor_rate:,.0f}/s, "
          f"ratio {rate / anchor_rate:.3f}; target {INGEST_TARGET:,.0f}/s: x{rate / INGEST_TARGET:.2f})")
    print(f"steps(maxPoints: 1000) on {QUERY_STEPS:,} steps over HTTP: p50 {p50:.1f} ms, p95 {p95:.1f} ms "
          f"(target p95 {P95_TARGET_MS:.0f} ms: x{P95_TARGET_MS / p95:.2f} headroom)")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
