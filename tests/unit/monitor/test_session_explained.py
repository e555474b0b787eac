"""What the session page explains: the overview of a session's settings and network, the marks of
interruptions on its step charts, and each PNode's role in its allocation (with why)."""

from __future__ import annotations

from pathlib import Path

import pytest

from computeall.monitor import store
from computeall.monitor.db import Database
from computeall.monitor.markers import markers
from computeall.monitor.overview import overview
from computeall.monitor.projector import Message, project
from computeall.monitor.roles import current_allocations, role
from computeall.protocol.config import DataConfig, SessionConfig
from computeall.protocol.events import (
    Allocated, EventEnvelope, PNodeQuarantined, Reallocated, ResultsDiscarded, RolledBack, SessionCompleted,
    SessionCreated, SessionPaused, SessionResumed, SessionStarted, StepAborted, StepCompleted, VNodePlacement,
)

MICRO_GPT = (Path(__file__).resolve().parents[3] / "examples" / "networks" / "micro-gpt.yaml").read_text()
MICRO_GPT_PARAMS = 131_904  # embedding 512x64 (the head ties it), 2 blocks of attention + SwiGLU, 5 norms


@pytest.fixture
def db(tmp_path):
    database = Database(tmp_path / "m.duckdb", readers=1)
    yield database
    database.close()


def apply(db: Database, sid: str, payloads: list, first_seq: int = 1) -> None:
    messages = []
    for seq, payload in enumerate(payloads, first_seq):
        env = EventEnvelope(session_id=sid, payload=payload)
        messages.append(Message("CA_LOG", seq, f"ca.evt.session.{sid}.{env.type}", env.model_dump_json().encode()))
    batch = project(messages)
    db.transaction(lambda con: store.apply(db, con, batch, []))


def step(i: int) -> StepCompleted:
    return StepCompleted(step=i, loss=3.0, tokens=64, step_time_s=0.5, lr=1e-3)


def placements(pnodes_by_replica: list[list[tuple[str, list[str]]]]) -> list[VNodePlacement]:
    return [VNodePlacement(vnode=v, op="x", pnode=p, params=1, precision="fp32", replica=r)
            for r, stages in enumerate(pnodes_by_replica) for p, vnodes in stages for v in vnodes]


# -- the overview ------------------------------------------------------------------


def test_the_overview_fills_in_defaults_and_reads_the_network_as_placed():
    got = overview({"network_yaml": MICRO_GPT, "data": {"files": ["corpus.txt"]}, "steps": 200, "batch_size": 8,
                    "micro_batches": 2, "precision": "bf16", "replicas": 2})
    assert got.network.name == "micro-gpt" and got.network.vnodes == 15
    assert got.network.parameters == MICRO_GPT_PARAMS
    assert [(c.value, c.vnodes) for c in got.network.precision] == [("bf16", 15)]  # the session's override
    assert [(c.value, c.vnodes) for c in got.network.wire] == [("fp32", 15)]
    assert (got.batch_size, got.micro_batches, got.micro_batch_size, got.tokens_per_step) == (8, 2, 4, 8 * 64)
    assert got.data == ["corpus.txt"] and got.replicas == "2" and got.sync == "gradients"
    # what the client left out is the protocol's default, not a blank
    defaults = SessionConfig(network_yaml=MICRO_GPT, data=DataConfig(files=["x"]), steps=1)
    assert got.betas == list(defaults.optimizer.betas) and got.lr_peak == defaults.lr.peak
    assert got.grad_clip == defaults.grad_clip and got.schedule == defaults.pipeline.schedule


def test_an_unreadable_network_is_named_and_the_rest_still_shown():
    got = overview({"network_yaml": "name: x\n", "data": {"dataset": "books"}, "steps": 5})
    assert got.network is None and "vocab_size" in got.network_problem
    assert got.data == ["dataset books"] and got.steps == 5 and got.tokens_per_step is None


def test_a_config_this_build_cannot_read_has_no_overview():
    assert overview({"network_yaml": MICRO_GPT, "steps": 5}) is None  # no data
    assert overview(None) is None


# -- markers -------------------------------------------------------------------------


def test_interruptions_are_marked_at_the_step_training_went_on_with(db):
    config = SessionConfig(network_yaml="name: t\n", data=DataConfig(files=["a"]), steps=20)
    first = placements([[("p0", ["a"]), ("p1", ["b"])]])
    apply(db, "s", [
        SessionCreated(config=config, owner="alice"), SessionStarted(),
        Allocated(placements=first, edges=[], pnodes=["p0", "p1"], bytes_across_per_step=0),
        *map(step, range(3)), SessionPaused(step=3), SessionResumed(), *map(step, range(3, 5)),
        StepAborted(step=5, reason="p1 lost"),
        Reallocated(placements=placements([[("p0", ["a", "b"])]]), edges=[], pnodes=["p0"], bytes_across_per_step=0,
                    reason="lost p1"),
        RolledBack(to_step=4, from_step=5), *map(step, range(5, 8)),
        PNodeQuarantined(pnode="p0", step=7, reason="recomputing b gave other results"),
        ResultsDiscarded(from_step=6, pnodes=["p0"], reason="r"),
    ])
    got = [(m["kind"], m["step"], m["type"]) for m in markers(db.con, "s")]
    assert got == [
        ("resumed", 3, "SessionResumed"), ("aborted", 5, "StepAborted"), ("reallocated", 5, "Reallocated"),
        ("rolled back", 5, "RolledBack"), ("quarantined", 7, "PNodeQuarantined"),
    ]
    texts = {m["kind"]: m["text"] for m in markers(db.con, "s")}
    assert texts["rolled back"] == "rolled back to the checkpoint after 4 steps: steps 4 to 4 run again"
    assert texts["reallocated"] == "reallocated (lost p1) onto p0"
    assert "recomputing b gave other results" in texts["quarantined"]
    assert markers(db.con, "other") == []


def test_a_quarantine_recorded_on_the_pnodes_subject_too_is_marked_once(db):
    config = SessionConfig(network_yaml="name: t\n", data=DataConfig(files=["a"]), steps=20)
    apply(db, "s", [SessionCreated(config=config, owner="alice"), step(0)])
    quarantined = EventEnvelope(session_id="s", payload=PNodeQuarantined(pnode="p0", step=0, reason="wrong"))
    batch = project([Message("CA_LOG", 3, "ca.evt.session.s.PNodeQuarantined", quarantined.model_dump_json().encode()),
                     Message("CA_LOG", 4, "ca.evt.pnode.p0.PNodeQuarantined", quarantined.model_dump_json().encode())])
    db.transaction(lambda con: store.apply(db, con, batch, []))
    assert [m["kind"] for m in markers(db.con, "s")] == ["quarantined"]


# -- roles ---------------------------------------------------------------------------


def test_each_pnode_is_a_stage_of_a_replica_in_pipeline_order(db):
    config = SessionConfig(network_yaml="name: t\n", data=DataConfig(files=["a"]), steps=20, micro_batches=2)
    apply(db, "s", [SessionCreated(config=config, owner="alice"), SessionStarted(), Allocated(
        placements=placements([[("p1", ["embed", "b0"]), ("p0", ["b1", "head"])], [("p3", ["embed", "b0"]), ("p2", ["b1", "head"])]]),
        edges=[], pnodes=["p0", "p1", "p2", "p3"], bytes_across_per_step=0, replicas=2, standbys=["p9"])])
    (placed,) = current_allocations(db.con, "alice")
    first = role(placed, "p1", joined_at=0.0, state="live")
    assert (first.kind, first.replica, first.stage, first.stages, first.replicas) == ("stage", 0, 0, 2, 2)
    assert first.vnodes == ["embed", "b0"] and "embed to b0 (2 VNodes)" in first.why
    last = role(placed, "p2", joined_at=0.0, state="live")
    assert (last.kind, last.replica, last.stage, last.vnodes) == ("stage", 1, 1, ["b1", "head"])
    standby = role(placed, "p9", joined_at=0.0, state="live")  # offered, no stage: it takes over a lost one's
    assert (standby.kind, standby.vnodes) == ("standby", []) and "takes over the stage" in standby.why
    assert current_allocations(db.con, "bob") == []


def test_an_idle_pnode_says_why(db):
    config = SessionConfig(network_yaml="name: t\n", data=DataConfig(files=["a"]), steps=20, checkpoint_every=50)
    apply(db, "s", [SessionCreated(config=config, owner="alice"), SessionStarted(),
                    Allocated(placements=placements([[("p0", ["a"])]]), edges=[], pnodes=["p0"], bytes_across_per_step=0)])
    (placed,) = current_allocations(db.con, "alice")
    assert role(placed, "p5", joined_at=placed.ts + 1, state="live").why == (
        "joined after session s was placed; it is considered at the session's next checkpoint (every 50 steps) "
        "and placed there if that makes steps faster")
    assert role(placed, "p5", joined_at=placed.ts - 1, state="live").why == "session s was placed on p0 without it"
    assert role(placed, "p5", joined_at=None, state="lost").why.startswith("lost: ")
    # a later reallocation is the one in force, and says why it happened
    apply(db, "s", [Reallocated(placements=placements([[("p5", ["a"])]]), edges=[], pnodes=["p5"],
                                bytes_across_per_step=0, reason="p5 joined")], first_seq=4)
    (placed,) = current_allocations(db.con, "alice")
    moved = role(placed, "p5", joined_at=0.0, state="live")
    assert moved.kind == "stage" and moved.why == "hosts a; placed again after: p5 joined"
    # a session that is over has no roles left
    apply(db, "s", [SessionCompleted(steps=20, final_loss=1.0)], first_seq=5)
    assert current_allocations(db.con, "alice") == []
