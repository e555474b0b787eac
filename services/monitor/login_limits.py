"""Failed logins are rate-limited, per client and per key prefix, in memory and in O(1).

A client is who asks: an HTTP peer's address, or a NATS identity (the role and name its reply inbox
carries, which only that identity may subscribe to). A key prefix is the public part of an API key,
`ca.<user>`: what a guesser aims at. Each has a token bucket of failures (`LoginLimit`: a burst,
then one more every so often); a right key costs nothing, a wrong one a token of both.

- A client out of tokens is refused outright, a right key included, so it learns nothing more
  until it may try again: "too many failed logins from ...; retry in N s".
- A prefix out of tokens (many clients guessing one user's keys) refuses only the clients that
  have failed lately. A client with a clean record is still checked, so the key's owner logs in
  from another address while the guessing goes on: a refused owner is one that failed too, and
  waits at most until its own bucket refills.

Memory is bounded: each table holds at most `capacity` buckets and drops the one touched longest
ago, which has most likely refilled (a full bucket is what a newcomer starts with); a client that
keeps knocking while refused is touched each time, so a flood of newcomers does not free it. Nothing
here touches DuckDB: a refused attempt costs a dict lookup.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from computeall.protocol.credentials import API_KEY_PREFIX

PREFIX_CHARS = 80  # a prefix is a name at most (64 characters): anything longer is cut, never stored whole
MALFORMED = "(not a computeall key)"


class TooManyAttempts(Exception):
    """A login refused before its key was looked at; `retry_after_s` says when to try again."""

    def __init__(self, message: str, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


@dataclass(frozen=True)
class LoginLimit:
    burst: int  # failures allowed at once
    refill_s: float  # one more failure allowed after this long


CLIENT_LIMIT = LoginLimit(burst=10, refill_s=6.0)  # 10 wrong keys, then one every 6 s (10 a minute)
PREFIX_LIMIT = LoginLimit(burst=20, refill_s=3.0)  # across every client guessing one user's keys
CAPACITY = 10_000


def key_prefix(api_key: str) -> str:
    """`ca.<user>` of a `ca.<user>.<secret>` key (its public part; bounded); one shared name for anything else."""
    prefix, dot, _ = api_key.rpartition(".")
    return prefix[:PREFIX_CHARS] if dot and prefix.startswith(f"{API_KEY_PREFIX}.") else MALFORMED


class _Buckets:
    """Token buckets by name, at most `capacity` of them (the least recently touched is dropped)."""

    def __init__(self, limit: LoginLimit, capacity: int, clock: Callable[[], float]) -> None:
        self.limit = limit
        self.capacity = capacity
        self.clock = clock
        self._tokens: OrderedDict[str, tuple[float, float]] = OrderedDict()  # name -> (tokens, when counted)

    def _now(self, name: str) -> float:
        """The tokens `name` has now (a bucket never seen, or refilled, is full)."""
        tokens, at = self._tokens.get(name, (self.limit.burst, 0.0))
        return min(self.limit.burst, tokens + (self.clock() - at) / self.limit.refill_s)

    def wait_s(self, name: str) -> float:
        """Seconds until `name` may fail once more (0: now). Asking counts as a touch: one that keeps
        knocking stays in the table, and those dropped for room are the ones gone quiet."""
        if name in self._tokens:
            self._tokens.move_to_end(name)
        return max(0.0, (1.0 - self._now(name)) * self.limit.refill_s)

    def is_full(self, name: str) -> bool:
        return self._now(name) >= self.limit.burst

    def spend(self, name: str) -> None:
        self._tokens[name] = (max(0.0, self._now(name) - 1.0), self.clock())
        self._tokens.move_to_end(name)
        while len(self._tokens) > self.capacity:
            self._tokens.popitem(last=False)

    def __len__(self) -> int:
        return len(self._tokens)


class LoginLimiter:
    def __init__(self, client: LoginLimit = CLIENT_LIMIT, prefix: LoginLimit = PREFIX_LIMIT, capacity: int = CAPACITY,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.clients = _Buckets(client, capacity, clock)
        self.prefixes = _Buckets(prefix, capacity, clock)

    def check(self, client: str, api_key: str) -> None:
        """`TooManyAttempts` when `client` may not try `api_key` now."""
        if wait := self.clients.wait_s(client):
            raise TooManyAttempts(f"too many failed logins from {client}; retry in {_seconds(wait)} s", _seconds(wait))
        prefix = key_prefix(api_key)
        if (wait := self.prefixes.wait_s(prefix)) and not self.clients.is_full(client):
            raise TooManyAttempts(f"too many failed logins with keys {prefix}.…; retry in {_seconds(wait)} s",
                                  _seconds(wait))

    def failed(self, client: str, api_key: str) -> None:
        self.clients.spend(client)
        self.prefixes.spend(key_prefix(api_key))


def _seconds(wait_s: float) -> int:
    return max(1, math.ceil(wait_s))
