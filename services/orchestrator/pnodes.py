"""Which PNodes are alive, from their heartbeats."""

from __future__ import annotations

import time

from computeall.protocol.telemetry import Heartbeat


class PNodeRegistry:
    def __init__(self, timeout_s: float = 5.0) -> None:
        self.timeout_s = timeout_s
        self._last: dict[str, tuple[float, Heartbeat]] = {}

    def beat(self, heartbeat: Heartbeat) -> None:
        self._last[heartbeat.pnode] = (time.monotonic(), heartbeat)

    def live(self) -> list[Heartbeat]:
        now = time.monotonic()
        return sorted(
            (hb for seen, hb in self._last.values() if now - seen <= self.timeout_s), key=lambda hb: hb.pnode
        )

    def is_live(self, pnode: str) -> bool:
        seen = self._last.get(pnode)
        return seen is not None and time.monotonic() - seen[0] <= self.timeout_s
