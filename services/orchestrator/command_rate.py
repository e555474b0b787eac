"""How fast each user's commands are taken: a token bucket per user, checked on the subject alone.

Every command takes a token; a user with none left has the command acknowledged unread. The first
refusal of a burst is the one the log records (the orchestrator records `CommandRejected` for it),
so a flood costs neither a read nor a write per command. A burst ends once the user has been slow
enough for their bucket to fill up again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

log = logging.getLogger("computeall.orchestrator.command_rate")


class Take(Enum):
    TAKEN = "taken"  # handle the command
    REFUSED_FIRST = "refused-first"  # refuse it, and record the refusal: a burst begins
    REFUSED = "refused"  # refuse it silently: its burst is already recorded


@dataclass
class _Bucket:
    tokens: float
    at: float
    refused: int = 0  # in the current burst; 0: not refusing


class CommandRate:
    def __init__(self, per_second: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.per_second = per_second
        self.burst = burst
        self.clock = clock
        self._buckets: dict[str, _Bucket] = {}  # one per user who sent a command: users are credentials, so few

    def take(self, user: str) -> Take:
        now = self.clock()
        bucket = self._buckets.setdefault(user, _Bucket(tokens=self.burst, at=now))
        bucket.tokens = min(self.burst, bucket.tokens + (now - bucket.at) * self.per_second)
        bucket.at = now
        if bucket.refused and bucket.tokens >= self.burst:
            log.info("user %s is under the command rate again; %d commands of theirs were refused", user, bucket.refused)
            bucket.refused = 0
        if bucket.tokens >= 1:
            bucket.tokens -= 1
            return Take.TAKEN
        bucket.refused += 1
        return Take.REFUSED_FIRST if bucket.refused == 1 else Take.REFUSED

    def describe(self, user: str) -> str:
        return (f"user {user} sends commands faster than {self.per_second:g} per second ({self.burst} at once): this one "
                "and the rest of the burst are refused unread, and only this one is recorded; send fewer, or wait "
                f"{self.burst / self.per_second:.0f}s and send them again")
