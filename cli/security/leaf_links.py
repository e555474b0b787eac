"""Closing a hub's leaf links, so that a changed leaf membership takes effect at once.

nats-server re-checks client connections when its configuration is reloaded, but not leaf links:
a leaf keeps the permissions it connected with, and a revoked leaf stays linked. So when a reload
changes what an existing leaf may do (one of its site's PNodes revoked, the leaf revoked or
expired), the hub's authority closes every leaf link through the system account
(`$SYS.REQ.SERVER.<id>.KICK`). A site still admitted reconnects within seconds with its new
permissions; a revoked one is refused. Every link is closed, not only the changed leaf's: what
identifies a link in `LEAFZ` (the remote's server name) is the remote's own claim. Closing waits for
the admitted sites to be back: the session grants change a site's permissions at every placement
on it, and the plans sent right after must not be lost on a link that is down.
"""

from __future__ import annotations

import asyncio
import json
import threading

from computeall.protocol import bus
from computeall.protocol.credentials import Credential

from .roles import Permissions

INTEREST_GRACE_S = 1.0  # how long a link that is back may take to carry its site's subscriptions again


def leaf_users(users: list[tuple[str, Permissions]]) -> dict[str, Permissions]:
    return {key: p for key, p in users if p.connection == "LEAFNODE"}


def changed_leaves(before: dict[str, Permissions], after: dict[str, Permissions]) -> bool:
    """Whether a leaf that may be linked now may do otherwise than its link carries: less, nothing, or more
    (a session placed on its site); a new leaf changes no link."""
    return any(after.get(key) != p for key, p in before.items())


async def close_leaf_links(system: Credential, admitted: int, back_within_s: float = 10.0) -> int:
    """Close every leaf link of the server `system` connects to; how many there were. Returns once the
    sites still admitted (at most `admitted` of the links) are linked again with as much interest as
    before, or after `back_within_s`: a request sent to a site's PNode while its link is down is lost,
    and the orchestrator sends plans right after the grants that closed it."""
    nc = await bus.connect(system, name="computeall-authority-system", allow_reconnect=False)
    try:
        server = nc._server_info["server_id"]
        links = await _leafz(nc, server)
        for link in links:
            await nc.request(f"$SYS.REQ.SERVER.{server}.KICK", json.dumps({"cid": link["id"]}).encode(), timeout=5)
        await _relinked(nc, server, links, min(len(links), admitted), back_within_s)
        return len(links)
    finally:
        await nc.close()


async def _relinked(nc, server: str, closed: list[dict], wanted: int, within_s: float) -> None:
    """Until `wanted` new links are up and, for a moment more at most, carry the interest the closed ones
    did (a site whose PNode was revoked carries less)."""
    loop = asyncio.get_running_loop()
    deadline, interest = loop.time() + within_s, sum(link.get("subscriptions", 0) for link in closed)
    gone = {link["id"] for link in closed}
    while wanted and loop.time() < deadline:
        back = [link for link in await _leafz(nc, server) if link["id"] not in gone]
        if len(back) >= wanted:
            if sum(link.get("subscriptions", 0) for link in back) >= interest:
                return
            deadline = min(deadline, loop.time() + INTEREST_GRACE_S)
        await asyncio.sleep(0.05)


async def _leafz(nc, server: str) -> list[dict]:
    reply = await nc.request(f"$SYS.REQ.SERVER.{server}.LEAFZ", b"{}", timeout=5)
    return (json.loads(reply.data).get("data") or {}).get("leafs") or []


def close_leaf_links_now(system: Credential, admitted: int) -> int:
    """`close_leaf_links` from synchronous code, whether or not its thread runs an event loop."""
    result: list[int] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            result.append(asyncio.run(close_leaf_links(system, admitted)))
        except BaseException as exc:  # handed to the caller's thread
            errors.append(exc)

    thread = threading.Thread(target=run, name="close-leaf-links")
    thread.start()
    thread.join()
    if errors:
        raise errors[0]
    return result[0]
