"""What the monitor projects from the event log, telemetry and heartbeats, read back over GraphQL."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from computeall.protocol.events import Allocated, EdgeTraffic, EventEnvelope, PNodeJoined, StepCompleted, VNodePlacement
from computeall.protocol.subjects import Subjects
from computeall.protocol.telemetry import Heartbeat, MemorySample, RequestStatus, StepTiming
from computeall.protocol.throughput import Throughput

from ..monitor_harness import data, event_items, publish, session_events
from ..waiting import wait_until
from .api import beat, caught_up

pytestmark = pytest.mark.timeout(120)


def test_steps_downsampling_keeps_each_buckets_extremes(system, keys):
    spikes = {1234: 50.0, 3333: -5.0}
    events = session_events("sd", "alice", 5000, loss=lambda i: spikes.get(i, 2.0 + (i % 7) * 0.01))
    seq = asyncio.run(publish(system.server, event_items(events)))
    wait_until(lambda: caught_up(system, keys["alice"], seq))
    steps = data(system.url, keys["alice"], '{ session(id: "sd") { steps(maxPoints: 100) { step loss } } }')
    points = steps["session"]["steps"]
    assert 50 <= len(points["step"]) <= 100
    by_step = dict(zip(points["step"], points["loss"]))
    assert by_step[1234] == 50.0 and by_step[3333] == -5.0
    ranged = data(system.url, keys["alice"], '{ session(id: "sd") { steps(from: 10, to: 19, maxPoints: 1000) { step } } }')
    assert ranged["session"]["steps"]["step"] == list(range(10, 20))


def test_malformed_messages_are_counted_and_skipped(system, keys, sessions):
    s = Subjects()
    bad_payload = json.dumps({"id": "x1", "type": "StepCompleted", "ts": time.time(), "session_id": "sa",
                              "payload": {"type": "StepCompleted", "step": "not a number"}}).encode()
    good = EventEnvelope(session_id="sa", payload=StepCompleted(step=50, loss=0.05, tokens=1024, step_time_s=0.05, lr=1e-3))
    before = data(system.url, keys["alice"], "{ monitor { malformed } }")["monitor"]["malformed"]
    seq = asyncio.run(publish(system.server, [
        (s.session_evt("sa", "StepCompleted"), b"\xff not json"),
        (s.session_evt("sa", "StepCompleted"), bad_payload),
        *event_items([good]),
    ]))
    wait_until(lambda: caught_up(system, keys["alice"], seq))
    after = data(system.url, keys["alice"], '{ monitor { malformed } session(id: "sa") { step } }')
    assert after["monitor"]["malformed"] == before + 2
    assert after["session"]["step"] == 51  # steps completed: 0 to 50


def test_future_event_types_are_stored_and_projected(system, keys, sessions):
    s = Subjects()

    def envelope(type_: str, payload: dict) -> bytes:
        return json.dumps({"id": f"f-{type_}", "type": type_, "ts": time.time(), "actor": "orchestrator",
                           "session_id": "sa", "schema_version": 1, "payload": {"type": type_, **payload}}).encode()

    validation = {"step": 40, "loss": 1.5, "perplexity": 4.48, "tokens": 512}
    checkpoint = {"step": 40, "bucket": "ca-checkpoints", "seconds": 0.1,
                  "objects": [{"vnode": "a", "object": "sa/40/a", "digest": "0" * 32, "bytes": 8}]}
    seq = asyncio.run(publish(system.server, [
        (s.session_evt("sa", "ValidationCompleted"), envelope("ValidationCompleted", validation)),
        (s.session_evt("sa", "CheckpointCommitted"), envelope("CheckpointCommitted", checkpoint)),
        (s.session_evt("sa", "SomethingNew"), envelope("SomethingNew", {"x": 1})),
    ]))
    wait_until(lambda: caught_up(system, keys["alice"], seq))
    got = data(system.url, keys["alice"], '{ session(id: "sa") { validations { step loss } checkpoints { step detail } '
                                          'events(types: ["SomethingNew"]) { type payload } } }')["session"]
    assert got["validations"] == [{"step": 40, "loss": 1.5}]
    assert got["checkpoints"][0]["step"] == 40 and got["checkpoints"][0]["detail"]["objects"][0]["vnode"] == "a"
    assert got["events"] == [{"type": "SomethingNew", "payload": {"type": "SomethingNew", "x": 1}}]


def test_topology_and_pnodes_from_events_telemetry_and_heartbeats(system, keys, sessions):
    s = Subjects()
    now = time.time()
    allocated = EventEnvelope(session_id="sa", payload=Allocated(
        placements=[VNodePlacement(vnode="embed", op="embedding", pnode="p1", params=1000, precision="fp32"),
                    VNodePlacement(vnode="block0", op="attention", pnode="p2", params=4000, precision="bf16")],
        edges=[EdgeTraffic(src="embed", dst="block0", bytes_per_step=65536)],
        pnodes=["p1", "p2"], bytes_across_per_step=65536))
    joined = EventEnvelope(payload=PNodeJoined(pnode="p1", host="h", os_pid=1, device="cpu", memory_bytes=1 << 30))
    memory = MemorySample(pnode="p1", ts=now, rss_bytes=123456, bytes_by_category={"weights": 4000},
                          pending_requests=2, hosted_vnodes=["embed"])
    request = RequestStatus(pnode="p1", session_id="sa", request="RunStep", step=3, state="done", ts=now, duration_s=0.1)
    seq = asyncio.run(publish(system.server, [
        *event_items([allocated]),
        (s.pnode_evt("p1", "PNodeJoined"), joined.model_dump_json().encode()),
        (s.tel("p1", "memory"), memory.model_dump_json().encode()),
        (s.tel("p1", "request"), request.model_dump_json().encode()),
    ]))

    asyncio.run(beat(system, Heartbeat(pnode="p2", host="h2", os_pid=2, device="cuda", memory_bytes=1 << 33,
                                       ts=time.time())))
    wait_until(lambda: caught_up(system, keys["alice"], seq))
    query = ('{ topology(sessionId: "sa") { vnodes { id op params precision pnode } edges { src dst bytesPerStep } '
             'bytesAcrossPerStep pnodes { id } } pnodes { id state rssBytes pendingRequests hostedVNodes bytesByCategory '
             'lastHeartbeat requests { request state } memory { rssBytes samples } } }')
    got = wait_until(lambda: (d := data(system.url, keys["alice"], query))["pnodes"]
                     and any(p["id"] == "p2" for p in d["pnodes"]) and d)
    topo = got["topology"]
    assert [v["id"] for v in topo["vnodes"]] == ["block0", "embed"]
    assert topo["edges"] == [{"src": "embed", "dst": "block0", "bytesPerStep": 65536.0}]
    assert {p["id"] for p in topo["pnodes"]} == {"p1", "p2"}
    pnodes = {p["id"]: p for p in got["pnodes"]}
    p1 = pnodes["p1"]
    assert (p1["state"], p1["rssBytes"], p1["pendingRequests"], p1["hostedVNodes"]) == ("live", 123456.0, 2, ["embed"])
    assert p1["bytesByCategory"] == {"weights": 4000}
    assert p1["requests"] == [{"request": "RunStep", "state": "done"}]
    assert p1["memory"] == [{"rssBytes": 123456.0, "samples": 1}]
    assert pnodes["p2"]["state"] == "live" and pnodes["p2"]["lastHeartbeat"] is not None
    # bob does not see alice's requests on a shared PNode
    bob = {p["id"]: p for p in data(system.url, keys["bob"], "{ pnodes { id requests { request } } }")["pnodes"]}
    assert bob["p1"]["requests"] == []


def test_replicas_topology_per_replica_and_reduction_bytes_per_step(system, keys):
    def placed(replica: int, pnodes: tuple[str, str]) -> list[VNodePlacement]:
        return [VNodePlacement(vnode="embed", op="embedding", pnode=pnodes[0], params=1000, precision="fp32", replica=replica),
                VNodePlacement(vnode="block0", op="attention", pnode=pnodes[1], params=4000, precision="fp32",
                               replica=replica)]

    allocated = EventEnvelope(session_id="sr", payload=Allocated(
        placements=placed(0, ("p1", "p2")) + placed(1, ("p3", "p3")),
        edges=[EdgeTraffic(src="embed", dst="block0", bytes_per_step=4096, replica=0)],
        pnodes=["p1", "p2", "p3"], bytes_across_per_step=4096, replicas=2))
    step = EventEnvelope(session_id="sr", payload=StepCompleted(step=1, loss=3.0, tokens=512, step_time_s=0.1, lr=1e-3,
                                                                reduce_bytes=20_000))
    seq = asyncio.run(publish(system.server, event_items(session_events("sr", "alice", 1) + [allocated, step])))
    wait_until(lambda: caught_up(system, keys["alice"], seq))

    def topology(replica: int) -> dict:
        query = ('query($r: Int) { topology(sessionId: "sr", replica: $r) { replica replicas { index pnodes } '
                 'vnodes { id pnode replica } edges { src dst crosses } pnodes { id } } }')
        return data(system.url, keys["alice"], query, {"r": replica})["topology"]

    first, second = topology(0), topology(1)
    assert first["replicas"] == second["replicas"] == [{"index": 0, "pnodes": ["p1", "p2"]}, {"index": 1, "pnodes": ["p3"]}]
    assert {v["id"]: v["pnode"] for v in first["vnodes"]} == {"embed": "p1", "block0": "p2"}
    assert {v["id"]: (v["pnode"], v["replica"]) for v in second["vnodes"]} == {"embed": ("p3", 1), "block0": ("p3", 1)}
    # this config's network cannot be rebuilt: only each replica's recorded crossing edges show
    assert [e["crosses"] for e in first["edges"]] == [True] and second["edges"] == []
    session = data(system.url, keys["alice"], '{ session(id: "sr") { replicas steps { reduceBytes } } }')["session"]
    assert session == {"replicas": 2, "steps": {"reduceBytes": [0, 20_000]}}


def test_time_shares_links_and_measured_bandwidth(system, keys, sessions):
    s = Subjects()
    now = time.time()
    fast = Throughput(flops_per_s=5e10, bandwidth_bytes_per_s=1.25e8, rtt_s=0.002, measured_at=now)
    slow = Throughput(flops_per_s=2e10, bandwidth_bytes_per_s=1.25e7, rtt_s=0.040, measured_at=now)
    allocated = EventEnvelope(session_id="sa", payload=Allocated(
        placements=[VNodePlacement(vnode="embed", op="embedding", pnode="q1", params=1000, precision="fp32"),
                    VNodePlacement(vnode="block0", op="attention", pnode="q2", params=4000, precision="fp32")],
        edges=[EdgeTraffic(src="embed", dst="block0", bytes_per_step=65536)],
        pnodes=["q1", "q2"], bytes_across_per_step=65536))
    joined = EventEnvelope(payload=PNodeJoined(pnode="q1", host="h", os_pid=1, device="cpu", memory_bytes=1 << 30,
                                               throughput=fast))

    def timing(pnode: str, step: int, sent: dict[str, int], compute: float, wait: float) -> bytes:
        return StepTiming(pnode=pnode, session_id="sa", step=step, ts=now + step, step_s=1.0, compute_s=compute,
                          send_s=0.1, wait_s=wait, sent_bytes=sent).model_dump_json().encode()

    seq = asyncio.run(publish(system.server, [
        *event_items([allocated]),
        (s.pnode_evt("q1", "PNodeJoined"), joined.model_dump_json().encode()),
        (s.tel("q1", "step"), timing("q1", 0, {"q2": 1000}, 0.5, 0.4)),
        (s.tel("q1", "step"), timing("q1", 1, {"q2": 3000}, 0.7, 0.2)),
        (s.tel("q2", "step"), timing("q2", 1, {"q1": 500}, 0.3, 0.6)),
    ]))

    # q2 reports its measurement only in heartbeats
    asyncio.run(beat(system, Heartbeat(pnode="q2", host="h2", os_pid=2, device="cpu", memory_bytes=1 << 30,
                                       ts=time.time(), throughput=slow)))
    wait_until(lambda: caught_up(system, keys["alice"], seq))
    query = ('{ topology(sessionId: "sa") { edges { src dst crosses linkBandwidthBytesPerS } '
             'links { src dst bytesPerStep bandwidthBytesPerS latencyS } '
             'pnodes { id timeShare { steps stepS compute send wait sentBytesPerStep } } } '
             'pnodes { id throughput { bandwidthBytesPerS rttS flopsPerS } '
             'timeShare(lastSteps: 5) { steps stepS compute send wait sentBytesPerStep } } }')
    # q2's timing is the last telemetry published: once it is in, so are q1's
    got = wait_until(lambda: (d := data(system.url, keys["alice"], query))
                     and any(p["id"] == "q2" and p["throughput"] and p["timeShare"] for p in d["pnodes"]) and d)
    pnodes = {p["id"]: p for p in got["pnodes"]}
    assert pnodes["q1"]["throughput"] == {"bandwidthBytesPerS": 1.25e8, "rttS": 0.002, "flopsPerS": 5e10}
    assert pnodes["q2"]["throughput"]["bandwidthBytesPerS"] == 1.25e7
    assert pnodes["q1"]["timeShare"] == pytest.approx(
        {"steps": 2, "stepS": 1.0, "compute": 0.6, "send": 0.1, "wait": 0.3, "sentBytesPerStep": 2000.0})
    assert pnodes["q2"]["timeShare"]["wait"] == pytest.approx(0.6)
    topo = got["topology"]
    # the topology reads its PNodes' time shares in one query: the same figures (over their last 20 steps)
    assert {p["id"]: p["timeShare"] for p in topo["pnodes"]} == {i: pnodes[i]["timeShare"] for i in ("q1", "q2")}
    # a tensor from q1 to q2 goes up q1's link and down q2's: the slower one's bandwidth
    assert topo["edges"] == [{"src": "embed", "dst": "block0", "crosses": True, "linkBandwidthBytesPerS": 1.25e7}]
    assert topo["links"] == [
        {"src": "q1", "dst": "q2", "bytesPerStep": 2000.0, "bandwidthBytesPerS": 1.25e7, "latencyS": pytest.approx(0.021)},
        {"src": "q2", "dst": "q1", "bytesPerStep": 500.0, "bandwidthBytesPerS": 1.25e7, "latencyS": pytest.approx(0.021)},
    ]
    # bob's key sees the PNodes, not what they did for alice
    bob = {p["id"]: p for p in data(system.url, keys["bob"], "{ pnodes { id timeShare { steps } } }")["pnodes"]}
    assert bob["q1"]["timeShare"] is None
