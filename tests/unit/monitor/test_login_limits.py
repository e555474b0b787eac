"""Failed logins are limited per client and per key prefix (`services/monitor/login_limits.py`): a client
over its limit is refused even with a right key and told when to retry; many clients guessing one
user's keys are refused while the owner, from a clean client, still logs in; memory stays bounded
under a flood of distinct prefixes; a refused attempt never reaches DuckDB."""

from __future__ import annotations

import pytest

from computeall.monitor.auth import Auth, hash_key
from computeall.monitor.login_limits import LoginLimit, LoginLimiter, TooManyAttempts, key_prefix
from computeall.protocol.credentials import new_api_key


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class NoDatabase:
    """Logging in needs no database: any use of it fails the test."""

    def __getattr__(self, name):
        raise AssertionError(f"a login touched the database ({name})")


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def auth(clock) -> tuple[Auth, str]:
    """An Auth whose one active key is alice's (as `load` would find it), with fast-to-reason limits."""
    auth = Auth(NoDatabase())
    key = new_api_key("alice")
    auth._active = {hash_key(key): "alice"}
    auth.limiter = LoginLimiter(client=LoginLimit(burst=3, refill_s=10.0), prefix=LoginLimit(burst=5, refill_s=4.0),
                                capacity=100, clock=clock)
    return auth, key


def wrong(user: str = "alice") -> str:
    return new_api_key(user)


def test_a_client_over_its_limit_is_refused_even_with_the_right_key_until_it_may_retry(auth, clock):
    auth, key = auth
    for _ in range(3):
        assert auth.login(wrong(), "10.0.0.9") is None
    with pytest.raises(TooManyAttempts, match=r"too many failed logins from 10\.0\.0\.9; retry in 10 s") as refused:
        auth.login(key, "10.0.0.9")
    assert refused.value.retry_after_s == 10
    clock.now += 4
    with pytest.raises(TooManyAttempts, match="retry in 6 s"):
        auth.login(key, "10.0.0.9")
    clock.now += 6
    assert auth.login(key, "10.0.0.9") == "alice", "one more try once a token is back"
    assert auth.login(key, "10.0.0.1") == "alice", "another client was never limited"


def test_a_right_key_costs_nothing(auth):
    auth, key = auth
    for _ in range(100):
        assert auth.login(key, "10.0.0.1") == "alice"
    assert auth.login(None, "10.0.0.1") is None and auth.login("", "10.0.0.1") is None, "no key: no guess, not counted"
    assert len(auth.limiter.clients) == 0


def test_many_clients_guessing_one_users_keys_are_refused_and_the_owner_still_logs_in(auth, clock):
    auth, key = auth
    guessers = [f"10.1.0.{i}" for i in range(20)]
    for guesser in guessers[:5]:  # the prefix's burst, one guess from each
        assert auth.login(wrong(), guesser) is None
    for guesser in guessers[:5]:  # each has failed lately: refused for the prefix, right key or not
        with pytest.raises(TooManyAttempts, match=r"too many failed logins with keys ca\.alice\.…; retry in 4 s"):
            auth.login(key, guesser)
    assert auth.login(key, "192.168.1.7") == "alice", "the owner, from a clean client, is checked and logs in"
    assert auth.login(wrong(), guessers[5]) is None, "a fresh client is checked (and then it has failed)"
    with pytest.raises(TooManyAttempts):
        auth.login(wrong(), guessers[5])
    assert auth.login(wrong("bob"), guessers[6]) is None, "other users' prefixes are not limited"
    clock.now += 4
    assert auth.login(wrong(), guessers[0]) is None, "the prefix refills: checked again"


def test_memory_stays_bounded_and_a_flood_of_newcomers_frees_no_one_who_keeps_knocking(auth):
    auth, key = auth
    for _ in range(3):
        auth.login(wrong(), "10.0.0.9")
    for i in range(10_000):  # distinct clients with distinct prefixes, the throttled client knocking meanwhile
        auth.login(wrong(f"user{i}"), f"10.2.{i // 250}.{i % 250}")
        if i % 50 == 0:
            with pytest.raises(TooManyAttempts):
                auth.login(key, "10.0.0.9")
    assert len(auth.limiter.prefixes) == len(auth.limiter.clients) == 100, "at most `capacity` buckets each"


def test_key_prefixes():
    assert key_prefix("ca.alice.s3cret") == "ca.alice"
    assert key_prefix("ca.a.b.s3cret") == "ca.a.b", "an old user's name with a dot"
    assert key_prefix("nope") == key_prefix("ca_nope") == key_prefix("") == "(not a computeall key)"
    assert len(key_prefix("ca." + "x" * 10_000 + ".secret")) == 80, "never stored whole"
