"""Test helpers around the real embedded cluster (`computeall.cli.embedded`): a corpus, waiting for PNodes."""

from __future__ import annotations

import asyncio

from computeall.cli.client import Client
from computeall.cli.embedded import running_cluster

__all__ = ["running_cluster", "stdlib_corpus", "wait_for_pnodes"]


def stdlib_corpus(max_bytes: int = 300_000) -> list[str]:
    from computeall.cli.default_corpus import stdlib_files

    return stdlib_files(max_bytes)


async def wait_for_pnodes(client: Client, names: list[str], timeout: float = 60.0) -> None:
    """Until every named PNode has sent a heartbeat (it starts in a few seconds: torch loads)."""
    seen: set[str] = set()
    done = asyncio.Event()

    async def on_beat(msg) -> None:
        seen.add(msg.subject.rsplit(".", 1)[-1])
        if seen >= set(names):
            done.set()

    sub = await client.nc.subscribe(client.subjects.heartbeat_all(), cb=on_beat)
    try:
        await asyncio.wait_for(done.wait(), timeout)
    finally:
        await sub.unsubscribe()
