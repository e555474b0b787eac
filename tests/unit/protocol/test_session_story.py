"""One session's whole life told through the aggregate, no NATS: each command returns the events
to record, the fold applies them, and every rule a user can run into says why."""

from pathlib import Path

import pytest

from computeall.protocol.config import DataConfig, SessionConfig
from computeall.protocol.events import (
    Allocated,
    CheckpointCommitted,
    CheckpointObject,
    CheckpointPruned,
    EventEnvelope,
    LossScaleChanged,
    PNodeLost,
    Reallocated,
    RolledBack,
    SessionPaused,
    StepAborted,
    StepCompleted,
    ValidationCompleted,
    VNodePlacement,
)
from computeall.protocol.session_state import Rejected, SessionState, fold
from computeall.protocol.session_status import TERMINAL, SessionStatus

NETWORK = (Path(__file__).resolve().parents[3] / "examples" / "networks" / "tiny-gpt.yaml").read_text()
VNODES = ["embed", "b0", "b1", "head"]


def config(**overrides) -> SessionConfig:
    return SessionConfig(network_yaml=NETWORK, data=DataConfig(files=["corpus.txt"]), steps=12, **overrides)


class Log:
    """The log in memory: what was recorded, and the state folded from it as it grows."""

    def __init__(self, sid: str = "s1") -> None:
        self.state = SessionState(id=sid)
        self.recorded: list[tuple[int, EventEnvelope]] = []

    def record(self, events: list, actor: str = "alice") -> list[str]:
        for payload in events:
            envelope = EventEnvelope(actor=actor, session_id=self.state.id, payload=payload)
            self.recorded.append((len(self.recorded) + 1, envelope))
            self.state.apply(envelope, len(self.recorded))
        return [type(p).__name__ for p in events]

    def steps(self, start: int, stop: int) -> None:
        self.record([StepCompleted(step=k, loss=10.0 - k, tokens=512, step_time_s=0.1, lr=1e-3) for k in range(start, stop)])

    def checkpoint(self, step: int) -> None:
        objects = [CheckpointObject(vnode=v, object=f"s1/{step}/{v}", digest="d", bytes=1) for v in VNODES]
        self.record([CheckpointCommitted(step=step, bucket="ckpt", objects=objects, seconds=0.1)])


def placements(pnode_of) -> dict:
    return dict(placements=[VNodePlacement(vnode=v, op="op", pnode=pnode_of(v), params=1, precision="fp32") for v in VNODES],
                edges=[], pnodes=sorted({pnode_of(v) for v in VNODES}), bytes_across_per_step=0)


def test_a_session_from_create_to_stop():
    log = Log()
    state = log.state

    # created without starting; the same create again (a redelivery) records nothing
    assert log.record(state.create(config(), owner="alice", start=False)) == ["SessionCreated"]
    assert (state.status, state.owner, state.fuse_heads) == (SessionStatus.CREATED, "alice", True)
    assert state.create(config(), owner="alice", start=False) == []
    with pytest.raises(Rejected, match="cannot pause a session that is created"):
        state.pause()

    # started and claimed by a driver, which places the network and runs steps
    assert log.record(state.start()) == ["SessionStarted"]
    assert state.status == "running"
    assert log.record(state.claim("orch-a", takeover_from=None), actor="orchestrator:orch-a") == ["SessionClaimed"]
    assert state.claimed_by == "orch-a"
    assert state.claim("orch-b", takeover_from=None) == [], "a session is claimed once"
    log.record([Allocated(**placements(lambda v: "p0" if v in ("embed", "head") else "p1"))])
    assert state.allocation == {"embed": "p0", "b0": "p1", "b1": "p1", "head": "p0"}
    log.steps(0, 5)
    log.checkpoint(5)
    assert (state.next_step, state.last_loss, state.checkpoint_step) == (5, 6.0, 5)
    assert state.at_boundary(5) == [], "nothing pending: the driver goes on"

    # a pause is a request until the driver reaches a step boundary; a second one records nothing
    assert log.record(state.pause()) == ["PauseRequested"]
    assert state.pause() == []
    assert state.status == SessionStatus.RUNNING and state.pause_requested
    assert log.record(state.at_boundary(5)) == ["SessionPaused"]
    assert (state.status, state.claimed_by, state.pause_requested) == (SessionStatus.PAUSED, None, False)
    assert state.resume_for_capacity() == [], "the orchestrator never resumes what a user paused"

    # resumed with head fusion switched off; a new claim continues from the checkpoint
    assert log.record(state.resume(fuse_heads=False)) == ["SessionResumed"]
    assert (state.status, state.fuse_heads) == (SessionStatus.RUNNING, False)
    log.record(state.claim("orch-b", takeover_from=None), actor="orchestrator:orch-b")
    assert log.recorded[-1][1].payload.resume_from_step == 5 and state.claimed_by == "orch-b"
    log.steps(5, 8)

    # failover: p1 is lost mid-step 8, everything moves to p0 and goes back to the checkpoint at 5
    log.record([
        PNodeLost(pnode="p1", step=8, silent_s=5.0),
        StepAborted(step=8, reason="p1 went silent"),
        Reallocated(**placements(lambda v: "p0"), reason="lost p1", moves={"b0": "p0", "b1": "p0"}),
        RolledBack(to_step=5, from_step=8),
    ])
    assert state.status == SessionStatus.RUNNING and state.claimed_by == "orch-b"
    assert state.allocation == dict.fromkeys(VNODES, "p0")
    assert state.next_step == 8, "steps 5..7 are re-run but stay recorded once"

    # steps go on; an older checkpoint is pruned; a validation is asked once and answered
    log.steps(8, 10)
    log.checkpoint(10)
    log.record([CheckpointPruned(step=5), LossScaleChanged(step=9, old=2.0**16, new=2.0**15, reason="overflow")])
    assert [c.step for c in state.checkpoints] == [10] and state.checkpoint_step == 10
    assert log.record(state.validate()) == ["ValidationRequested"]
    assert state.validate() == []
    log.record([ValidationCompleted(step=10, loss=4.0, perplexity=54.6, tokens=256)])
    assert not state.validation_requested

    # a stop asked after a pause wins at the boundary; a second stop records nothing
    log.record(state.pause())
    assert log.record(state.stop()) == ["StopRequested"]
    assert state.stop() == []
    assert log.record(state.at_boundary(10)) == ["SessionStopped"]
    assert log.recorded[-1][1].payload.step == 10
    assert state.status in TERMINAL and state.claimed_by is None
    assert state.claim("orch-c", takeover_from=None) == []

    # the fold of what was recorded is the state the commands built up
    assert fold("s1", log.recorded) == state
    assert state.last_seq == len(log.recorded)


def test_rejections_say_why():
    log = Log()
    state = log.state
    with pytest.raises(Rejected, match="cannot stop a session that is new"):
        state.stop()
    log.record(state.create(config(), owner="alice"))
    with pytest.raises(Rejected, match="session s1 already exists"):
        state.create(config(seed=7), owner="alice")
    with pytest.raises(Rejected, match="already exists"):
        state.create(config(), owner="bob")
    with pytest.raises(Rejected, match="cannot resume a session that is running"):
        state.resume()
    with pytest.raises(Rejected, match="cannot start a session that is running"):
        state.start()
    log.record(state.pause())
    log.record(state.at_boundary(0))
    with pytest.raises(Rejected, match="cannot pause a session that is paused"):
        state.pause()
    with pytest.raises(Rejected, match="cannot validate a session that is paused; resume it first"):
        state.validate()
    log.record(state.stop())
    with pytest.raises(Rejected, match="cannot stop a session that is stopped"):
        state.stop()
    with pytest.raises(Rejected, match="cannot resume a session that is stopped"):
        state.resume()


@pytest.mark.parametrize("before", ["created", "paused"])
def test_stopping_a_session_nobody_drives_keeps_its_last_checkpoint(before):
    log = Log()
    log.record(log.state.create(config(), owner="alice", start=before != "created"))
    if before == "paused":
        log.steps(0, 3)
        log.checkpoint(3)
        log.record([SessionPaused(step=3)])
    assert log.state.status == before
    assert log.record(log.state.stop()) == ["SessionStopped"]
    assert log.recorded[-1][1].payload.step == (3 if before == "paused" else 0)
    assert log.state.status == SessionStatus.STOPPED


@pytest.mark.parametrize("verb, ends", [("stop", "SessionStopped"), ("pause", "SessionPaused")])
def test_a_request_made_while_no_driver_ran_is_honoured_at_the_claim(verb, ends):
    log = Log()
    log.record(log.state.create(config(), owner="alice"))
    log.record(log.state.claim("orch-a", takeover_from=None), actor="orchestrator:orch-a")
    log.steps(0, 4)
    log.checkpoint(4)
    log.steps(4, 6)
    log.record(getattr(log.state, verb)())  # orch-a dies before its next boundary
    assert log.record(log.state.claim("orch-b", takeover_from="orch-a")) == [ends]
    assert log.recorded[-1][1].payload.step == 4, "the last checkpoint stands"
    assert log.state.claimed_by is None


def test_paused_for_capacity_resumes_by_itself():
    log = Log()
    log.record(log.state.create(config(), owner="alice"))
    assert log.state.resume_for_capacity() == []
    log.record(log.state.pause_for_capacity("the network needs about 900 MiB"))
    assert log.state.waits_for_capacity and log.state.pause_reason == "not enough capacity: the network needs about 900 MiB"
    assert log.record(log.state.resume_for_capacity()) == ["SessionResumed"]
    assert (log.state.status, log.state.pause_reason, log.state.waits_for_capacity) == (SessionStatus.RUNNING, None, False)


def test_status_reads_as_its_value():
    assert SessionStatus.RUNNING == "running" and f"{SessionStatus.PAUSED}" == "paused"
    assert SessionState(id="x").model_dump(mode="json")["status"] == "new"
    assert SessionState.model_validate({"id": "x", "status": "failed"}).status is SessionStatus.FAILED
