"""How long a request to a session's PNodes may go unanswered once the bus lost messages.

A step's requests, replies and tensor frames are core NATS messages, at most once: a nats-server
killed while they are in flight takes some with it, and the step waits for what never comes. Every
such loss comes with a connection made again (the orchestrator's own, or a PNode's, which its
heartbeat reports), so once one is seen a request may take `STALL_FACTOR` times as long as the
same kind of request took lately (at least `STALL_FLOOR_S`, the time to reconnect and hear of it)
before it counts as stalled (`PNodeCalls.all`). Each stall of the same request doubles its
allowance, so a step merely slower than usual is let through. Without a measured duration (the
first request of its kind) there is no early deadline: the heartbeats and the PNodes' own apply.
"""

from __future__ import annotations

import statistics
from collections import defaultdict, deque

STALL_FACTOR = 4.0
STALL_FLOOR_S = 2.0
RECENT = 8  # durations kept per kind of request


class StallDeadlines:
    def __init__(self) -> None:
        self._took: dict[str, deque[float]] = defaultdict(lambda: deque(maxlen=RECENT))
        self._stalls: dict[str, int] = defaultdict(int)  # in a row, per kind of request

    def seconds(self, kind: str) -> float | None:
        took = self._took[kind]
        if not took:
            return None
        return max(STALL_FLOOR_S, STALL_FACTOR * statistics.median(took)) * 2 ** self._stalls[kind]

    def took(self, kind: str, seconds: float) -> None:
        self._took[kind].append(seconds)
        self._stalls[kind] = 0

    def stalled(self, kind: str) -> None:
        self._stalls[kind] += 1
