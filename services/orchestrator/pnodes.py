"""Which PNodes are alive, leaving or lost, from their heartbeats."""

from __future__ import annotations

import time

from computeall.protocol.telemetry import Heartbeat


class PNodeRegistry:
    def __init__(self, timeout_s: float = 5.0) -> None:
        self.timeout_s = timeout_s
        self._last: dict[str, tuple[float, Heartbeat]] = {}
        self._lost: set[str] = set()

    def beat(self, heartbeat: Heartbeat) -> bool:
        """Record a heartbeat; True when it comes from a PNode declared lost (its state is stale)."""
        returned = heartbeat.pnode in self._lost
        self._lost.discard(heartbeat.pnode)
        self._last[heartbeat.pnode] = (time.monotonic(), heartbeat)
        return returned

    def live(self, include_leaving: bool = False) -> list[Heartbeat]:
        now = time.monotonic()
        return sorted(
            (hb for seen, hb in self._last.values()
             if now - seen <= self.timeout_s and (include_leaving or not hb.leaving)),
            key=lambda hb: hb.pnode,
        )

    def is_live(self, pnode: str) -> bool:
        seen = self._last.get(pnode)
        return seen is not None and time.monotonic() - seen[0] <= self.timeout_s

    def is_leaving(self, pnode: str) -> bool:
        seen = self._last.get(pnode)
        return seen is not None and seen[1].leaving

    def silent_s(self, pnode: str) -> float:
        seen = self._last.get(pnode)
        return time.monotonic() - seen[0] if seen else float("inf")

    def newly_lost(self) -> list[str]:
        """PNodes that went silent since the last call: each is reported once."""
        now = time.monotonic()
        lost = [p for p, (seen, _) in self._last.items() if now - seen > self.timeout_s and p not in self._lost]
        self._lost.update(lost)
        return lost
