"""Each user's part of the PNode pool, and the registry as one user's sessions see it.

The live PNodes are split between the users who run sessions: each gets an equal share (the first
users in name order one more when it does not divide), at most `max_pnodes_per_user`, and a PNode
serves one user at a time. A user keeps the PNodes their sessions already hold, up to their share,
so a newcomer takes free PNodes first and the others give up only what is over their share. A
user's own sessions share their part. With one user and no cap there is nothing to split, and with
fewer PNodes than users nothing can be: then every session may use every PNode.

A session's driver is given a `PNodeShare` in place of the registry: placement, recovery and the
wait for PNodes see only the owner's part (less what another user still holds while moving off),
and a PNode over the owner's share counts as leaving, so the session moves off it at its next step
boundary through a checkpoint of that step, as it does off a PNode that leaves.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from computeall.protocol.telemetry import Heartbeat

from .pnodes import PNodeRegistry, capacity
from .step_time import PNodeCapacity


def partition(live: list[str], held: Mapping[str, set[str]], cap: int | None = None) -> dict[str, set[str]] | None:
    """Each user's PNodes, or None when the pool is not split. `held`: every user running sessions,
    with the PNodes those sessions hold now."""
    users = sorted(held)
    if len(live) < len(users) or (len(users) <= 1 and (cap is None or cap >= len(live))):
        return None
    equal, extra = divmod(len(live), len(users))
    share = {u: min(equal + (i < extra), cap or len(live)) for i, u in enumerate(users)}
    alive, taken, parts = set(live), set(), {}
    for u in users:  # keep what one holds, up to the share; a PNode two users hold goes to the first
        kept = [p for p in sorted(held[u]) if p in alive and p not in taken][: share[u]]
        parts[u] = set(kept)
        taken.update(kept)
    free = [p for p in live if p not in taken]
    for u in users:
        more = share[u] - len(parts[u])
        parts[u].update(free[:more])
        del free[:more]
    return parts


class PNodeShare:
    """The registry as the sessions of one user see it: only the PNodes of their part of the pool."""

    def __init__(self, registry: PNodeRegistry, part: Callable[[], tuple[set[str] | None, set[str]]]) -> None:
        self.registry = registry
        self._part = part  # -> (the user's part, None: the pool is not split; what other users hold now)

    def usable(self) -> set[str] | None:
        """The PNodes these sessions may take now (None: every live one): their part, less what
        another user's session has not moved off yet."""
        mine, others = self._part()
        return None if mine is None else mine - others

    def live(self, include_leaving: bool = False) -> list[Heartbeat]:
        usable = self.usable()
        return [hb for hb in self.registry.live(include_leaving) if usable is None or hb.pnode in usable]

    def capacities(self, exclude: set[str] = frozenset()) -> list[PNodeCapacity]:
        return [capacity(hb, self.registry.memory_bytes(hb)) for hb in self.live() if hb.pnode not in exclude]

    def is_leaving(self, pnode: str) -> bool:
        """Leaving the pool, or over the owner's share now: either way the session moves off it."""
        mine, _ = self._part()
        return self.registry.is_leaving(pnode) or (mine is not None and pnode not in mine)

    def __getattr__(self, name: str):
        """Everything else (heartbeats, silence, quarantine, ...) is the registry's, unchanged."""
        return getattr(self.registry, name)
