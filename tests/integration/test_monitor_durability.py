"""Restart without loss or duplicates, `replay rebuild`, telemetry retention: a real nats-server
and a real monitor process, killed with SIGKILL in the middle of ingesting."""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import time

import pytest

from computeall.cli.commands.replay_rebuild import register_rebuild
from computeall.protocol.subjects import Subjects
from computeall.protocol.telemetry import MemorySample

from .monitor_harness import MonitorProcess, data, event_items, publish, session_events
from .waiting import wait_until

pytestmark = pytest.mark.timeout(180)

STEPS = 20_000
SAMPLES = 10_000
SNAPSHOT = (
    '{ monitor { events malformed positions } session(id: "sr") { status step lastLoss tokens '
    "steps(maxPoints: 20000) { step loss } events(limit: 3) { seq type } } "
    "pnodes { id rssBytes memory { ts rssBytes samples } } }"
)


def local_key(monitor: MonitorProcess) -> str:
    return monitor.local_key


def memory_items(n: int, start_ts: float, pnode: str = "p1") -> list[tuple[str, bytes]]:
    subject = Subjects().tel(pnode, "memory")
    return [
        (subject, MemorySample(pnode=pnode, ts=start_ts + i, rss_bytes=1000 + i).model_dump_json().encode())
        for i in range(n)
    ]


def rebuild_cli(monitor: MonitorProcess, capsys) -> dict:
    parser = argparse.ArgumentParser()
    register_rebuild(parser.add_subparsers())
    operator, itself = (str(monitor.server.credential_file(role)) for role in ("admin", "monitor"))
    args = parser.parse_args(["rebuild", "--credential", operator, "--monitor-credential", itself,
                              "--data-dir", str(monitor.data_dir), "--json"])
    assert args.func(args) == 0
    return json.loads(capsys.readouterr().out)


def test_kill_mid_ingest_then_restart_loses_and_duplicates_nothing_and_rebuild_matches(nats_server, tmp_path, capsys):
    last_log = asyncio.run(publish(nats_server, event_items(session_events("sr", "local", STEPS))))
    last_tel = asyncio.run(publish(nats_server, memory_items(SAMPLES, time.time())))
    with MonitorProcess(nats_server, tmp_path / "data").start() as monitor:
        key = local_key(monitor)

        def position() -> int:
            return data(monitor.url, key, "{ monitor { positions } }")["monitor"]["positions"].get("CA_LOG", 0)

        partial = wait_until(position, interval=0.01)
        assert monitor.stop(signal.SIGKILL) == -signal.SIGKILL
        assert partial < last_log, "the kill came after ingest finished; publish more so it lands mid-ingest"

        monitor.start()
        wait_until(lambda: (p := data(monitor.url, key, "{ monitor { positions } }")["monitor"]["positions"])
                   and p.get("CA_LOG") == last_log and p.get("CA_TEL") == last_tel, timeout=60)
        before = data(monitor.url, key, SNAPSHOT)
        assert before["monitor"]["events"] == STEPS + 2 and before["monitor"]["malformed"] == 0
        assert before["session"]["steps"]["step"] == list(range(STEPS))
        assert before["session"]["tokens"] == STEPS * 1024
        (p1,) = before["pnodes"]
        assert len(p1["memory"]) == SAMPLES and len({m["ts"] for m in p1["memory"]}) == SAMPLES

        # rebuilt by the running monitor: the same rows, and the user's key still works
        reply = rebuild_cli(monitor, capsys)
        assert reply["where"] == "by the running monitor" and reply["events"] == STEPS + 2
        assert data(monitor.url, key, SNAPSHOT) == before

        # rebuilt offline, with no monitor running
        assert monitor.stop() == 0
        assert rebuild_cli(monitor, capsys)["where"] == "offline"
        monitor.start()
        assert data(monitor.url, key, SNAPSHOT) == before
        assert monitor.stop() == 0


def test_old_telemetry_is_folded_into_buckets(nats_server, tmp_path):
    now = time.time()
    bucket = 60.0
    old_start = (now // bucket) * bucket - 3600  # one hour ago, bucket-aligned: 60 samples per bucket
    last = asyncio.run(publish(nats_server, memory_items(600, old_start) + memory_items(30, now - 30)))
    with MonitorProcess(
        nats_server, tmp_path / "data", "--raw-telemetry", "300", "--telemetry-bucket", str(bucket), "--retention-every", "0.2"
    ).start() as monitor:
        key = local_key(monitor)

        def folded():
            got = data(monitor.url, key, '{ monitor { positions } pnodes { memory { ts rssBytes rssMaxBytes samples } } }')
            if got["monitor"]["positions"].get("CA_TEL") != last:
                return None
            memory = got["pnodes"][0]["memory"]
            # every old sample folded: a retention pass may have run while the monitor still caught up
            return None if any(m["samples"] == 1 and m["ts"] < now - 300 for m in memory) else memory

        memory = wait_until(folded)
        aggregated = [m for m in memory if m["samples"] > 1]
        raw = [m for m in memory if m["samples"] == 1]
        assert [m["samples"] for m in aggregated] == [60] * 10 and len(raw) == 30
        first = aggregated[0]
        assert first["ts"] == old_start and first["rssMaxBytes"] == 1059 and first["rssBytes"] == pytest.approx(1029.5)
        assert monitor.stop() == 0
