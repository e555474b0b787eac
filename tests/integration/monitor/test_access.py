"""Who may read and do what through the monitor's GraphQL API, and the limits that keep it answering:
real HTTP (httpx) and a real websocket client (websockets, graphql-transport-ws)."""

from __future__ import annotations

import asyncio
import json
import time

import nats.errors
import pytest
import websockets

from computeall.protocol.events import EventEnvelope, Sample, SamplesGenerated, StepCompleted
from computeall.protocol.eventlog import EventLog
from computeall.protocol.subjects import Subjects

from ..identities import connect_as
from ..monitor_harness import data, event_items, gql, publish, session_events
from ..waiting import wait_until, wait_until_async
from .api import caught_up, cli, ws_connect

pytestmark = pytest.mark.timeout(120)


def test_user_cli_and_key_lookup(system, keys):
    result = cli(system, "user", "whoami", "--api-key", keys["alice"], "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {"user": "alice"}
    bad = cli(system, "user", "whoami", "--api-key", "ca_nope")
    assert bad.returncode == 2 and "unknown or revoked" in bad.stderr
    assert data(system.url, keys["alice"], "{ me { name } }") == {"me": {"name": "alice"}}


def test_no_key_or_a_wrong_key_is_401(system):
    assert gql(system.url, None, "{ me { name } }").status_code == 401
    response = gql(system.url, "ca_wrong", "{ me { name } }")
    assert response.status_code == 401 and "API key" in response.json()["errors"][0]["message"]


def test_the_local_key_logs_in_and_no_request_hands_out_a_key(system):
    assert data(system.url, system.local_key, "{ me { name } }") == {"me": {"name": "local"}}

    async def ask():
        nc = await connect_as(system.server, "admin")
        try:
            await nc.request("ca.mon.user.default-key", b"{}", timeout=5)
        finally:
            await nc.close()

    with pytest.raises(nats.errors.NoRespondersError):  # the verb is gone: the key is only in its 0600 file
        asyncio.run(ask())


def test_a_key_sees_and_commands_only_its_own_sessions(system, keys, sessions):
    alice, bob = keys["alice"], keys["bob"]
    listed = data(system.url, alice, "{ sessions { id owner status step lastLoss tokens } }")["sessions"]
    assert [s["id"] for s in listed] == ["sa"]
    assert listed[0] == {"id": "sa", "owner": "alice", "status": "running", "step": 50, "lastLoss": 0.1,  # steps completed
                         "tokens": 50 * 1024.0}
    assert data(system.url, alice, '{ session(id: "sb") { id } }') == {"session": None}
    assert data(system.url, alice, '{ topology(sessionId: "sb") { sessionId } }') == {"topology": None}

    refused = gql(system.url, alice, 'mutation { pauseSession(id: "sb") { commandId } }').json()
    assert refused["data"] is None and "session sb not found" in refused["errors"][0]["message"]
    paused = data(system.url, bob, 'mutation { pauseSession(id: "sb") { sessionId commandId } }')["pauseSession"]

    async def recorded_commands():
        nc = await connect_as(system.server, "orchestrator")
        try:
            return await EventLog(nc.jetstream(), Subjects()).read("ca.cmd.*.session.sb")
        finally:
            await nc.close()

    commands = [json.loads(r.data) for r in asyncio.run(recorded_commands())]
    assert [(c["type"], c["actor"], c["id"]) for c in commands] == [("PauseSession", "bob", paused["commandId"])]


def test_samples_by_step_newest_first_and_only_the_owners(system, keys, sessions):
    def written(step: int) -> EventEnvelope:
        texts = [Sample(prompt="ROMEO:", text=f" at {step}", tokens=3), Sample(prompt="", text=f"new {step}", tokens=2)]
        return EventEnvelope(session_id="sa", actor="orchestrator",
                             payload=SamplesGenerated(step=step, samples=texts, pnode="p1", seconds=0.1))

    seq = asyncio.run(publish(system.server, event_items([written(s) for s in (10, 30, 20)])))
    wait_until(lambda: caught_up(system, keys["alice"], seq))
    query = '{ session(id: "sa") { samples(limit: 2) { step texts { prompt text tokens } } } }'
    shown = data(system.url, keys["alice"], query)["session"]["samples"]
    assert shown == [
        {"step": step, "texts": [{"prompt": "ROMEO:", "text": f" at {step}", "tokens": 3},
                                 {"prompt": "", "text": f"new {step}", "tokens": 2}]}
        for step in (30, 20)
    ]
    assert data(system.url, keys["bob"], query) == {"session": None}


def test_create_session_is_published_as_the_user(system, keys):
    config = {"network_yaml": "name: tiny\n", "data": {"files": ["a.txt"]}, "steps": 10}
    created = data(system.url, keys["alice"], "mutation($c: JSON!) { createSession(config: $c) { sessionId } }",
                   {"c": config})["createSession"]
    sid = created["sessionId"]
    # the recorded CreateSession names its owner before any orchestrator answers
    row = wait_until(lambda: data(system.url, keys["alice"], f'{{ session(id: "{sid}") {{ owner status }} }}')["session"])
    assert row == {"owner": "alice", "status": "new"}  # new until an orchestrator accepts it
    assert data(system.url, keys["bob"], f'{{ session(id: "{sid}") {{ id }} }}') == {"session": None}
    bad = gql(system.url, keys["alice"], "mutation($c: JSON!) { createSession(config: $c) { sessionId } }",
              {"c": {"steps": 0}}).json()
    assert "invalid session config" in bad["errors"][0]["message"]


def test_depth_and_cost_limits(system, keys):
    deep = "{ __schema { types { fields { type { ofType { ofType { ofType { ofType { ofType { name } } } } } } } } } }"
    response = gql(system.url, keys["alice"], deep).json()
    assert "query depth" in response["errors"][0]["message"]
    costly = gql(system.url, keys["alice"], "{ sessions(limit: 1000) { steps(maxPoints: 1000) { step } } }").json()
    assert "cost" in costly["errors"][0]["message"].lower()


def test_oversized_documents_are_refused_unparsed_and_the_monitor_keeps_answering(system, keys):
    pid = system.process.pid
    huge = "{ " + "me { name } " * 400_000 + "}"  # 4.8 MB: parsing it took 18 s and 679 MiB
    refused = gql(system.url, keys["alice"], huge)
    assert refused.status_code == 413 and "request body is over" in refused.json()["errors"][0]["message"]
    long = "{ " + "me { name } " * 8_000 + "}"  # 96 KB: under the body limit, over the document limit
    assert f"the document is {len(long):,} bytes" in gql(system.url, keys["alice"], long).json()["errors"][0]["message"]

    async def over_websocket():
        ws = await ws_connect(system.url, {"apiKey": keys["alice"]})
        assert json.loads(await asyncio.wait_for(ws.recv(), 5))["type"] == "connection_ack"
        await ws.send(json.dumps({"id": "1", "type": "subscribe", "payload": {"query": long}}))
        answer = json.loads(await asyncio.wait_for(ws.recv(), 5))
        await ws.send(json.dumps({"id": "2", "type": "subscribe", "payload": {"query": huge}}))
        with pytest.raises(websockets.ConnectionClosed):  # over the message limit: closed unread
            await asyncio.wait_for(ws.recv(), 5)
        return answer

    answer = asyncio.run(over_websocket())
    assert answer["type"] == "error" and "the document is" in json.dumps(answer["payload"])
    started = time.monotonic()
    assert data(system.url, keys["alice"], "{ me { name } }") == {"me": {"name": "alice"}}
    assert time.monotonic() - started < 1.0, "the next query is answered within a second"
    assert system.process.poll() is None and system.process.pid == pid, "no restart"


def test_revoked_key_stops_working_at_once(system, keys):
    new = data(system.url, keys["alice"], 'mutation { createApiKey(label: "temp") { id apiKey } }')["createApiKey"]
    assert data(system.url, new["apiKey"], "{ me { name } }") == {"me": {"name": "alice"}}
    assert data(system.url, new["apiKey"], f'mutation {{ revokeApiKey(id: "{new["id"]}") }}') == {"revokeApiKey": True}
    assert gql(system.url, new["apiKey"], "{ me { name } }").status_code == 401
    stored = data(system.url, keys["alice"], "{ me { apiKeys { id revokedAt } } }")["me"]["apiKeys"]
    assert [k["revokedAt"] is not None for k in stored if k["id"] == new["id"]] == [True]


def test_websocket_subscriptions_deliver_steps_and_events(system, keys, sessions):
    async def scenario():
        ws = await ws_connect(system.url, {"apiKey": keys["alice"]})
        assert json.loads(await asyncio.wait_for(ws.recv(), 5))["type"] == "connection_ack"
        await ws.send(json.dumps({"id": "1", "type": "subscribe", "payload": {
            "query": 'subscription { steps(sessionId: "sa") { step loss } }'}}))
        await ws.send(json.dumps({"id": "2", "type": "subscribe", "payload": {
            "query": 'subscription { sessionEvents(sessionId: "sa") { type } }'}}))
        await ws.send(json.dumps({"id": "3", "type": "subscribe", "payload": {
            "query": 'subscription { steps(sessionId: "sb") { step } }'}}))
        await wait_until_async(  # both of alice's subscriptions are live before anything is published
            lambda: asyncio.to_thread(
                lambda: data(system.url, keys["alice"], "{ monitor { subscriptions } }")["monitor"]["subscriptions"] >= 2),
            what="two live subscriptions")
        events = [EventEnvelope(session_id="sa", payload=StepCompleted(step=100 + i, loss=0.5, tokens=1, step_time_s=0.1, lr=1e-3))
                  for i in range(3)]
        await publish(system.server, event_items(events))
        got: dict[str, list] = {"1": [], "2": [], "3": []}
        while len(got["1"]) < 3 or len(got["2"]) < 3 or not got["3"]:
            msg = json.loads(await asyncio.wait_for(ws.recv(), 10))
            got[msg["id"]].append(msg)
        await ws.close()
        return got

    got = asyncio.run(scenario())
    assert [m["payload"]["data"]["steps"]["step"] for m in got["1"]] == [100, 101, 102]
    assert [m["payload"]["data"]["sessionEvents"]["type"] for m in got["2"]] == ["StepCompleted"] * 3
    # bob's session: not found, as an error on that subscription only, with no data
    assert "session sb not found" in json.dumps(got["3"][0]["payload"])
    assert not (got["3"][0]["payload"].get("data") or {}).get("steps")


def test_a_subscription_to_a_session_not_projected_yet_waits_for_it(system, keys):
    """A session page opened before the monitor has the session (the link `computeall train`
    prints) gets its steps once the session is projected, not an error that never clears."""
    async def scenario():
        ws = await ws_connect(system.url, {"apiKey": keys["alice"]})
        assert json.loads(await asyncio.wait_for(ws.recv(), 5))["type"] == "connection_ack"
        await ws.send(json.dumps({"id": "1", "type": "subscribe", "payload": {
            "query": 'subscription { steps(sessionId: "later") { step } }'}}))
        await wait_until_async(
            lambda: asyncio.to_thread(
                lambda: data(system.url, keys["alice"], "{ monitor { subscriptions } }")["monitor"]["subscriptions"] >= 1),
            what="a live subscription")
        with pytest.raises(asyncio.TimeoutError):  # nothing yet, and no error either
            await asyncio.wait_for(ws.recv(), 1.0)
        await publish(system.server, event_items(session_events("later", "alice", 3)))
        got = [json.loads(await asyncio.wait_for(ws.recv(), 10)) for _ in range(3)]
        await ws.close()
        return got

    got = asyncio.run(scenario())
    assert [m["payload"]["data"]["steps"]["step"] for m in got] == [0, 1, 2]


def test_websocket_without_a_key_is_closed(system):
    async def scenario():
        ws = await ws_connect(system.url, {})
        with pytest.raises(websockets.ConnectionClosed):
            await asyncio.wait_for(ws.recv(), 5)

    asyncio.run(scenario())


def test_dashboard_placeholder_when_not_built(system):
    import httpx

    response = httpx.get(system.url + "/")
    assert response.status_code == 200 and "not built" in response.text
