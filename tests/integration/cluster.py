"""Test helpers around the real embedded cluster (`computeall.cli.embedded`): a corpus, waiting for PNodes."""

from __future__ import annotations

import asyncio

from computeall.cli.embedded import running_cluster
from computeall.cli.supervisor import Supervisor
from computeall.protocol.subjects import Subjects

from .identities import connect_as

__all__ = ["running_cluster", "stdlib_corpus", "wait_for_pnodes"]


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
