"""Closing a hub's leaf links, so that a changed leaf membership takes effect at once.

nats-server re-checks client connections when its configuration is reloaded, but not leaf links:
a leaf keeps the permissions it connected with, and a revoked leaf stays linked. So when a reload
changes what an existing leaf may do (one of its site's PNodes revoked, the leaf revoked or
expired), the hub's authority closes every leaf link through the system account
(`$SYS.REQ.SERVER.<id>.KICK`). A site still admitted reconnects within seconds with its new
permissions; a revoked one is refused. Every link is closed, not only the changed leaf's: what
identifies a link in `LEAFZ` (the remote's server name) is the remote's own claim.
"""

from __future__ import annotations

import asyncio
import json
import threading

from computeall.protocol import bus
from computeall.protocol.credentials import Credential

from .roles import Permissions


def leaf_users(users: list[tuple[str, Permissions]]) -> dict[str, Permissions]:
    return {key: p for key, p in users if p.connection == "LEAFNODE"}


def changed_leaves(before: dict[str, Permissions], after: dict[str, Permissions]) -> bool:
    """Whether a leaf that may be linked now may do less, or nothing (a new leaf changes no link)."""
    return any(after.get(key) != p for key, p in before.items())


async def close_leaf_links(system: Credential) -> int:
    """Close every leaf link of the server `system` connects to; how many there were."""
    nc = await bus.connect(system, name="computeall-authority-system", allow_reconnect=False)
    try:
        server = nc._server_info["server_id"]
        reply = await nc.request(f"$SYS.REQ.SERVER.{server}.LEAFZ", b"{}", timeout=5)
        links = (json.loads(reply.data).get("data") or {}).get("leafs") or []
        for link in links:
            await nc.request(f"$SYS.REQ.SERVER.{server}.KICK", json.dumps({"cid": link["id"]}).encode(), timeout=5)
        return len(links)
    finally:
        await nc.close()


def close_leaf_links_now(system: Credential) -> int:
    """`close_leaf_links` from synchronous code, whether or not its thread runs an event loop."""
    result: list[int] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            result.append(asyncio.run(close_leaf_links(system)))
        except BaseException as exc:  # handed to the caller's thread
            errors.append(exc)

    thread = threading.Thread(target=run, name="close-leaf-links")
    thread.start()
    thread.join()
    if errors:
        raise errors[0]
    return result[0]
