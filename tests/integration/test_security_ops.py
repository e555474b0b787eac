"""Security stories of operations, against real servers and processes: wrong API keys are rate-limited
per client and per key prefix (over HTTP and over `ca.mon.auth`) while the owner still logs in from
elsewhere; secrets never reach a process's argv."""

from __future__ import annotations

import re

import httpx
import pytest

from computeall.cli.nats_server import EmbeddedNats
from computeall.protocol import monitor_api as api
from computeall.protocol.credentials import new_api_key
from computeall.protocol.subjects import Subjects

from .identities import connect_as
from .monitor.api import create_user
from .monitor_harness import MonitorProcess

ME = "{ me { name } }"


@pytest.fixture(scope="module")
def monitor(tmp_path_factory):
    root = tmp_path_factory.mktemp("logins")
    with EmbeddedNats(root / "nats") as server:
        monitor = MonitorProcess(server, root / "data", "--web-dir", str(root / "no-dashboard")).start()
        try:
            yield monitor
        finally:
            if monitor.process:
                assert monitor.stop() == 0, monitor.log()


@pytest.fixture(scope="module")
def keys(monitor):
    return {name: create_user(monitor, name) for name in ("alice", "bob")}


def login_from(address: str, monitor: MonitorProcess, key: str) -> httpx.Response:
    """A GraphQL request from `address` (any of 127.0.0.0/8 reaches the monitor on 127.0.0.1)."""
    with httpx.Client(transport=httpx.HTTPTransport(local_address=address), timeout=10) as http:
        return http.post(f"{monitor.url}/graphql", json={"query": ME}, headers={"Authorization": f"Bearer {key}"})


def test_wrong_keys_over_http_are_limited_per_address_and_per_prefix_and_the_owner_still_logs_in(monitor, keys):
    for _ in range(10):  # mallory guesses alice's keys from one address: each guess is checked...
        assert login_from("127.0.0.2", monitor, new_api_key("alice")).status_code == 401
    refused = login_from("127.0.0.2", monitor, keys["alice"])  # ...then nothing is, not even the right key
    assert refused.status_code == 429
    told = re.fullmatch(r"too many failed logins from 127\.0\.0\.2; retry in ([1-6]) s", refused.json()["errors"][0]["message"])
    assert told and refused.headers["retry-after"] == told[1], refused.text

    for i in range(3, 13):  # guesses of alice's keys from ten more addresses: the prefix's budget is spent
        assert login_from(f"127.0.0.{i}", monitor, new_api_key("alice")).status_code == 401
    again = login_from("127.0.0.3", monitor, new_api_key("alice"))
    assert again.status_code == 429
    assert again.json()["errors"][0]["message"].startswith("too many failed logins with keys ca.alice.…; retry in ")

    owner = login_from("127.0.0.1", monitor, keys["alice"])  # alice herself, from an address that never failed
    assert owner.status_code == 200 and owner.json()["data"] == {"me": {"name": "alice"}}
    assert login_from("127.0.0.3", monitor, keys["bob"]).json()["data"] == {"me": {"name": "bob"}}, \
        "bob's prefix was never guessed, and .3 failed only once"


async def test_wrong_keys_over_nats_are_limited_per_identity_and_another_identity_still_logs_in(monitor, keys):
    subject = api.monitor_subject(Subjects(), api.AUTH)

    async def ask(nc, key: str) -> api.MonitorReply:
        reply = await nc.request(subject, api.Auth(api_key=key).model_dump_json().encode(), timeout=10)
        return api.MonitorReply.model_validate_json(reply.data)

    mallory = await connect_as(monitor.server, "user", "mallory")
    bob = await connect_as(monitor.server, "user", "bob")
    try:
        for _ in range(10):
            assert (await ask(mallory, new_api_key("bob"))).error == "unknown or revoked API key"
        refused = await ask(mallory, keys["bob"])
        assert not refused.ok and refused.user is None
        assert re.fullmatch(r"too many failed logins from user:mallory; retry in [1-6] s", refused.error), refused.error
        assert (await ask(bob, keys["bob"])).user == "bob", "another identity, the key's owner, still logs in"
    finally:
        await mallory.close()
        await bob.close()
