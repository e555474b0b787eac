"""Each PNode's tokens per second is in the session's unit (tokens per second of wall time), so the
PNodes' figures add up to the session's across replicas and never exceed it; and each PNode's busy
share is its compute time over the step's wall time."""

from __future__ import annotations

from computeall.monitor import reads
from computeall.monitor.db import Database
from computeall.monitor.named_series import PNODE_BUSY, PNODE_THROUGHPUT, named_series
from computeall.protocol.config import DataConfig, SessionConfig
from computeall.protocol.events import (
    Allocated, ResultsDiscarded, SessionCreated, StepCompleted, VNodePlacement,
)

from .projected import apply

CONFIG = SessionConfig(network_yaml="name: t\n", data=DataConfig(files=["a"]), steps=10, micro_batches=2)


def allocated(replicas: dict[str, int]) -> Allocated:
    """A stage on each PNode, in the replica given: {pnode: replica}."""
    placements = [VNodePlacement(vnode=f"v-{p}", op="x", pnode=p, params=1, precision="fp32", replica=r)
                  for p, r in replicas.items()]
    return Allocated(placements=placements, edges=[], pnodes=sorted(replicas), bytes_across_per_step=0,
                     replicas=len(set(replicas.values())))


def step(i: int, compute: dict[str, float], tokens: int = 4096, seconds: float = 2.0) -> StepCompleted:
    return StepCompleted(step=i, loss=3.0, tokens=tokens, step_time_s=seconds, lr=1e-3, compute_s_by_pnode=compute)


def values(db: Database, source) -> dict[str, list[float]]:
    return {line["name"]: line["value"] for line in named_series(db.con, source, "s", None, None, 1000)}


def session_tokens_per_s(db: Database) -> float:
    return reads.session(db.con, "alice", "s")["tokens_per_s"]


def test_one_pipeline_every_stage_makes_the_sessions_tokens_per_second(db):
    apply(db, [SessionCreated(config=CONFIG, owner="alice"), allocated({"p0": 0, "p1": 0}),
               step(0, {"p0": 0.01, "p1": 0.5})])
    # 4096 tokens in 2 s of wall time: 2048 tokens/s, however little a stage computed (not 409,600)
    assert session_tokens_per_s(db) == 2048.0
    assert values(db, PNODE_THROUGHPUT) == {"p0": [2048.0], "p1": [2048.0]}
    assert values(db, PNODE_BUSY) == {"p0": [0.005], "p1": [0.25]}


def test_replicas_share_the_sessions_tokens_per_second(db):
    apply(db, [SessionCreated(config=CONFIG, owner="alice"), allocated({"p0": 0, "p1": 0, "p2": 1, "p3": 1}),
               step(0, {"p0": 0.2, "p1": 0.2, "p2": 0.3, "p3": 0.3})])
    per_pnode = values(db, PNODE_THROUGHPUT)
    assert per_pnode == {"p0": [1024.0], "p1": [1024.0], "p2": [1024.0], "p3": [1024.0]}
    # one stage of each replica together make the session's tokens/s
    assert per_pnode["p0"][0] + per_pnode["p2"][0] == session_tokens_per_s(db)


def test_the_allocation_in_force_at_each_step_counts(db):
    apply(db, [SessionCreated(config=CONFIG, owner="alice"), allocated({"p0": 0, "p1": 1}), step(0, {"p0": 1, "p1": 1}),
               allocated({"p0": 0}), step(1, {"p0": 1})])  # the second PNode left: one replica from step 1
    assert values(db, PNODE_THROUGHPUT) == {"p0": [1024.0, 2048.0], "p1": [1024.0]}


def test_discarded_steps_leave_the_per_pnode_charts_too(db):
    apply(db, [SessionCreated(config=CONFIG, owner="alice"), allocated({"p0": 0}),
               *(step(i, {"p0": 1.0}) for i in range(4)), ResultsDiscarded(from_step=2, pnodes=["p9"], reason="r")])
    lines = named_series(db.con, PNODE_THROUGHPUT, "s", None, None, 1000)
    assert [line["step"] for line in lines] == [[0, 1]]
