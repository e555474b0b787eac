"""The GraphQL fields the session page explains itself with, over real HTTP from a real monitor:
steps done and planned, the overview, the marks of interruptions, each PNode's tokens/s in the
session's unit and busy share, each PNode's role; and another user sees none of it."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from computeall.protocol.config import DataConfig, SessionConfig
from computeall.protocol.events import (
    Allocated, EventEnvelope, PNodeJoined, Reallocated, RolledBack, SessionCreated, SessionStarted, StepAborted,
    StepCompleted, VNodePlacement,
)
from computeall.protocol.subjects import Subjects

from ..monitor_harness import data, event_items, publish
from ..waiting import wait_until
from .api import caught_up

pytestmark = pytest.mark.timeout(120)

NETWORK = (Path(__file__).resolve().parents[3] / "examples" / "networks" / "micro-gpt.yaml").read_text()
QUERY = """query($id: ID!) { session(id: $id) {
  step plannedSteps tokensPerS
  overview { network { name vnodes parameters precision { value vnodes } } batchSize microBatches tokensPerStep replicas }
  markers { kind step type text }
  pnodeThroughput { name step value } pnodeBusy { name value }
} }"""
ROLES = "{ pnodes { id roles { sessionId kind replica stage stages vnodes why } } }"


def placement(pnode: str, vnode: str) -> VNodePlacement:
    return VNodePlacement(vnode=vnode, op="x", pnode=pnode, params=1, precision="fp32")


def joined(pnode: str) -> tuple[str, bytes]:
    env = EventEnvelope(actor="orchestrator", payload=PNodeJoined(pnode=pnode, host="h", os_pid=1, device="cpu", memory_bytes=1))
    return Subjects().pnode_evt(pnode, "PNodeJoined"), env.model_dump_json().encode()


def step(i: int, pnodes: list[str]) -> StepCompleted:
    return StepCompleted(step=i, loss=3.0, tokens=1000, step_time_s=0.5, lr=1e-3,
                         compute_s_by_pnode={p: 0.1 for p in pnodes})


def test_the_session_page_fields(system, keys):
    config = SessionConfig(network_yaml=NETWORK, data=DataConfig(files=["corpus.txt"]), steps=12, batch_size=4,
                           micro_batches=2)
    two = Allocated(placements=[placement("e0", "embed"), placement("e1", "head")], edges=[], pnodes=["e0", "e1"],
                    bytes_across_per_step=0)
    one = Reallocated(placements=[placement("e0", "embed"), placement("e0", "head")], edges=[], pnodes=["e0"],
                      bytes_across_per_step=0, reason="lost e1")
    payloads = [SessionCreated(config=config, owner="alice"), SessionStarted(), two, *(step(i, ["e0", "e1"]) for i in range(4)),
                StepAborted(step=4, reason="e1 lost"), one, RolledBack(to_step=2, from_step=4), *(step(i, ["e0"]) for i in range(4, 6))]
    before = [joined("e0"), joined("e1")]
    session = event_items([EventEnvelope(session_id="ex", actor="orchestrator", payload=p) for p in payloads])
    seq = asyncio.run(publish(system.server, [*before, *session, joined("e2")]))  # e2 after the session was placed
    wait_until(lambda: caught_up(system, keys["alice"], seq))

    s = data(system.url, keys["alice"], QUERY, {"id": "ex"})["session"]
    assert (s["step"], s["plannedSteps"], s["tokensPerS"]) == (6, 12, 2000.0)
    assert s["overview"]["network"]["name"] == "micro-gpt" and s["overview"]["network"]["vnodes"] == 15
    assert s["overview"]["network"]["parameters"] == 131_904
    assert s["overview"]["network"]["precision"] == [{"value": "fp32", "vnodes": 15}]
    assert (s["overview"]["batchSize"], s["overview"]["microBatches"], s["overview"]["tokensPerStep"]) == (4, 2, 4 * 64)
    assert [(m["kind"], m["step"]) for m in s["markers"]] == [("aborted", 4), ("reallocated", 4), ("rolled back", 4)]
    # each PNode in the session's unit: 1000 tokens per 0.5 s of wall time, not per 0.1 s of its compute
    assert {line["name"]: line["value"] for line in s["pnodeThroughput"]} == {"e0": [2000.0] * 6, "e1": [2000.0] * 4}
    assert {line["name"]: line["value"] for line in s["pnodeBusy"]} == {"e0": [0.2] * 6, "e1": [0.2] * 4}

    roles = {p["id"]: p["roles"] for p in data(system.url, keys["alice"], ROLES)["pnodes"]}
    (e0,) = roles["e0"]
    assert (e0["sessionId"], e0["kind"], e0["stage"], e0["stages"], e0["vnodes"]) == ("ex", "stage", 0, 1, ["embed", "head"])
    assert "placed again after: lost e1" in e0["why"]
    assert [r["kind"] for r in roles["e2"]] == ["idle"] and "joined after session ex was placed" in roles["e2"][0]["why"]
    # bob has no session: no roles, and alice's session reads as missing
    assert all(p["roles"] == [] for p in data(system.url, keys["bob"], ROLES)["pnodes"])
    assert data(system.url, keys["bob"], QUERY, {"id": "ex"}) == {"session": None}
