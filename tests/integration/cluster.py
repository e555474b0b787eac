"""Test helpers around the real embedded cluster (`computeall.cli.embedded`): a corpus, waiting for PNodes."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

from computeall.cli.embedded import running_cluster
from computeall.cli.supervisor import Supervisor
from computeall.protocol.subjects import Subjects

from .identities import connect_as

__all__ = ["extra_pnode", "running_cluster", "stdlib_corpus", "wait_for_pnodes"]


def stdlib_corpus(max_bytes: int = 300_000) -> list[str]:
    from computeall.cli.default_corpus import stdlib_files

    return stdlib_files(max_bytes)


async def wait_for_pnodes(supervisor: Supervisor, names: list[str], timeout: float = 60.0) -> None:
    """Until every named PNode has sent a heartbeat (it starts in a few seconds: torch loads).
    Heartbeats are the services' business: this listens as the monitor does."""
    seen: set[str] = set()
    done = asyncio.Event()

    async def on_beat(msg) -> None:
        seen.add(msg.subject.rsplit(".", 1)[-1])
        if seen >= set(names):
            done.set()

    nc = await connect_as(supervisor.credentials, "monitor")
    await nc.subscribe(Subjects().heartbeat_all(), cb=on_beat)
    try:
        await asyncio.wait_for(done.wait(), timeout)
    finally:
        await nc.close()


def extra_pnode(supervisor: Supervisor, name: str, logs: Path, *args: str) -> subprocess.Popen:
    """A PNode the supervisor does not keep running, for a test to kill, mute or stop itself: the
    supervisor's credential for `name`, as the cluster's own PNodes run; its output in `logs/<name>.log`."""
    return subprocess.Popen(
        [sys.executable, "-m", "computeall.pnode", *supervisor.credential_args("pnode", name),
         "--processes-on-machine", "3", *args],
        stdout=open(logs / f"{name}.log", "wb"), stderr=subprocess.STDOUT)
