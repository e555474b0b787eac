"""The PNodes page's bytes by kind per hosted VNode: a PNode's latest memory sample is projected, and
GraphQL serves each VNode's row to the owner of its session only."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from graphql import graphql

from computeall.monitor.projector import Message, project
from computeall.monitor.server import schema
from computeall.monitor import store
from computeall.protocol.config import DataConfig, SessionConfig
from computeall.protocol.events import SessionCreated
from computeall.protocol.telemetry import MemorySample, VNodeMemory

from .test_session_explained import apply, db  # noqa: F401  (db: the fixture)

CONFIG = SessionConfig(network_yaml="name: t\n", data=DataConfig(files=["a"]), steps=20)
QUERY = "{ pnodes { id vnodeMemory { sessionId vnode params weights master optimizer gradients activations } } }"


def row(sid: str, vnode: str, params: int, activations: int = 0) -> VNodeMemory:
    return VNodeMemory(session_id=sid, vnode=vnode, params=params, weights=2 * params, master=2 * params,
                       optimizer=2 * params + 8, gradients=0, activations=activations)


def sample(ts: float, vnodes: list[VNodeMemory]) -> Message:
    data = MemorySample(pnode="p1", ts=ts, rss_bytes=1 << 20, vnodes=vnodes).model_dump_json().encode()
    return Message("CA_TEL", int(ts), "ca.tel.p1.memory", data)


def served(db, user: str) -> list[dict]:  # noqa: F811
    async def run():
        services = SimpleNamespace(db=db, heartbeat_timeout_s=5.0)
        result = await graphql(schema(), QUERY, context_value=SimpleNamespace(user=user, services=services))
        assert result.errors is None, result.errors
        return result.data["pnodes"]

    return asyncio.run(run())


def test_each_vnode_row_of_the_latest_sample_reaches_its_sessions_owner_only(db):  # noqa: F811
    apply(db, "mine", [SessionCreated(config=CONFIG, owner="alice")])
    apply(db, "theirs", [SessionCreated(config=CONFIG, owner="bob")], first_seq=2)
    older = sample(1.0, [row("mine", "embed", 10)])
    latest = sample(2.0, [row("mine", "embed", 1000, activations=4096), row("mine", "b0.attn", 300),
                          row("theirs", "embed", 77)])
    batch = project([latest, older])  # out of order: the newest sample wins
    db.transaction(lambda con: store.apply(db, con, batch, []))

    alice = served(db, "alice")
    assert alice == [{"id": "p1", "vnodeMemory": [
        {"sessionId": "mine", "vnode": "embed", "params": 1000.0, "weights": 2000.0, "master": 2000.0,
         "optimizer": 2008.0, "gradients": 0.0, "activations": 4096.0},
        {"sessionId": "mine", "vnode": "b0.attn", "params": 300.0, "weights": 600.0, "master": 600.0,
         "optimizer": 608.0, "gradients": 0.0, "activations": 0.0},
    ]}]
    assert [(m["sessionId"], m["vnode"]) for m in served(db, "bob")[0]["vnodeMemory"]] == [("theirs", "embed")]
    assert served(db, "carol")[0]["vnodeMemory"] == []
