"""Shared helpers of the monitor's integration tests (no tests here): a real monitor
subprocess, a GraphQL client over real HTTP, and events built with the real protocol models."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from computeall.cli.nats_server import EmbeddedNats
from computeall.protocol.config import DataConfig, SessionConfig
from computeall.protocol.events import EventEnvelope, SessionCreated, SessionStarted, StepCompleted

from .identities import connect_as, publisher_of

PYTHON = sys.executable


class MonitorProcess:
    def __init__(self, server: EmbeddedNats, data_dir: Path, *extra: str) -> None:
        self.server = server
        self.nats_url = server.url
        self.data_dir = data_dir
        self.extra = extra
        self.process: subprocess.Popen | None = None
        self.url = ""

    def start(self, timeout: float = 20.0) -> "MonitorProcess":
        address = self.data_dir / "monitor.json"
        address.unlink(missing_ok=True)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        log = open(self.data_dir / "monitor.log", "ab")
        self.process = subprocess.Popen(
            [PYTHON, "-m", "computeall.monitor", "--credential", str(self.server.credential_file("monitor")),
             "--local-key-file", str(self.server.local_api_key_file()), "--data-dir", str(self.data_dir), *self.extra],
            stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        deadline = time.monotonic() + timeout
        while not address.exists():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"monitor did not start: {(self.data_dir / 'monitor.log').read_text()[-3000:]}")
            time.sleep(0.05)
        self.url = json.loads(address.read_text())["url"]
        return self

    def stop(self, sig: int = signal.SIGTERM) -> int:
        assert self.process
        self.process.send_signal(sig)
        rc = self.process.wait(15)
        self.process = None
        return rc

    def __enter__(self) -> "MonitorProcess":
        return self

    def __exit__(self, *failure: object) -> None:
        """A test that failed leaves no monitor behind (one that passed stopped it and checked its exit)."""
        if self.process:
            self.process.kill()
            self.process.wait(15)
            self.process = None

    @property
    def local_key(self) -> str:
        """The local user's API key, as `computeall up` keeps it."""
        return self.server.security.local_api_key()

    def log(self) -> str:
        return (self.data_dir / "monitor.log").read_text()


@contextmanager
def monitor_running(root: Path, *extra: str) -> Iterator[MonitorProcess]:
    """A monitor on a nats-server of its own under `root`; it must exit cleanly at the end. Its --web-dir
    is empty: the tests see the placeholder page whether or not web/dist is built."""
    with EmbeddedNats(root / "nats") as server:
        monitor = MonitorProcess(server, root / "data", "--web-dir", str(root / "no-dashboard"), *extra).start()
        try:
            yield monitor
        finally:
            if monitor.process:
                assert monitor.stop() == 0, monitor.log()


def gql(url: str, key: str | None, query: str, variables: dict | None = None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.post(f"{url}/graphql", json={"query": query, "variables": variables or {}}, headers=headers, timeout=10)


def data(url: str, key: str, query: str, variables: dict | None = None) -> dict[str, Any]:
    response = gql(url, key, query, variables)
    assert response.status_code == 200, response.text
    body = response.json()
    assert not body.get("errors"), body
    return body["data"]


def session_config(steps: int = 100) -> SessionConfig:
    return SessionConfig(network_yaml="name: tiny\n", data=DataConfig(files=["corpus.txt"]), steps=steps)


def session_events(sid: str, owner: str, steps: int, loss=lambda i: 5.0 / (1 + i)) -> list[EventEnvelope]:
    events = [
        EventEnvelope(session_id=sid, actor="orchestrator", payload=SessionCreated(config=session_config(steps), owner=owner)),
        EventEnvelope(session_id=sid, actor="orchestrator", payload=SessionStarted()),
    ]
    for i in range(steps):
        events.append(
            EventEnvelope(
                session_id=sid, actor="orchestrator",
                payload=StepCompleted(step=i, loss=loss(i), tokens=1024, step_time_s=0.05, lr=1e-3, loss_scale=1.0),
            )
        )
    return events


async def publish(server: EmbeddedNats, items: list[tuple[str, bytes]]) -> int:
    """Publish (subject, data) into the streams with acks, each as the identity that may publish
    it (the streams are set up as a service would); returns the last sequence."""
    from computeall.protocol.eventlog import ensure_streams
    from computeall.protocol.subjects import Subjects

    setup = await connect_as(server, "orchestrator")
    try:
        await ensure_streams(setup.jetstream(), Subjects())
    finally:
        await setup.close()
    by_publisher: dict[tuple, list[tuple[int, str, bytes]]] = {}
    for i, (subject, payload) in enumerate(items):
        by_publisher.setdefault(publisher_of(subject), []).append((i, subject, payload))
    seqs = []
    for (role, name), group in by_publisher.items():
        nc = await connect_as(server, role, name)
        try:
            js = nc.jetstream()
            futures = [await js.publish_async(subject, payload) for _, subject, payload in group]
            await js.publish_async_completed()
            seqs += [f.result().seq for f in futures]
        finally:
            await nc.close()
    return max(seqs, default=0)


def event_items(events: list[EventEnvelope]) -> list[tuple[str, bytes]]:
    from computeall.protocol.subjects import Subjects

    s = Subjects()
    return [(s.session_evt(e.session_id, e.type), e.model_dump_json().encode()) for e in events]
