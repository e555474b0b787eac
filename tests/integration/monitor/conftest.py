"""One monitor process per test module, on a real nats-server, with two users and two sessions."""

from __future__ import annotations

import asyncio

import pytest

from ..monitor_harness import event_items, monitor_running, publish, session_events
from ..waiting import wait_until
from .api import caught_up, create_user


@pytest.fixture(scope="module")
def system(tmp_path_factory):
    with monitor_running(tmp_path_factory.mktemp("monitor-api")) as monitor:
        yield monitor


@pytest.fixture(scope="module")
def keys(system):
    return {"alice": create_user(system, "alice"), "bob": create_user(system, "bob")}


@pytest.fixture(scope="module")
def sessions(system, keys):
    seq = asyncio.run(
        publish(system.server, event_items(session_events("sa", "alice", 50) + session_events("sb", "bob", 20)))
    )
    wait_until(lambda: caught_up(system, keys["alice"], seq))
    return {"alice": "sa", "bob": "sb"}
