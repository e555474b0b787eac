"""A step's RunStep goes out right behind the last step's ApplyStep when the loop goes straight on
(one control round trip a step), and is dropped when the loop does something else first. Where each
replica decides its own inner steps, the ApplyStep goes right behind its RunStep too: no step waits
for the orchestrator."""

from __future__ import annotations

import asyncio

import pytest

from computeall.orchestrator.errors import SessionError
from computeall.orchestrator.step import TrainingStep
from computeall.protocol.config import DataConfig, SessionConfig
from computeall.protocol.replica_sync import ReplicaSync
from computeall.protocol.events import StepCompleted
from computeall.protocol.pnode_api import PNodeReply
from computeall.protocol.session_state import SessionState

ROUND_TRIP_S = 0.05


class Recorder:
    def __init__(self, **config) -> None:
        self.state = SessionState(id="s", config=SessionConfig(network_yaml="name: t\n", data=DataConfig(files=["a"]),
                                                               steps=10, **config))
        self.recorded: list = []

    async def record(self, payload) -> None:
        self.recorded.append(payload)
        if isinstance(payload, StepCompleted):
            self.state = self.state.model_copy(update={"next_step": payload.step + 1})

    async def events(self) -> list:
        return list(self.recorded)


class PNodes:
    """One PNode a round trip away: what was sent, and whether the last ApplyStep was answered then."""

    first_replica = ["p0"]

    def __init__(self) -> None:
        self.sent: list[tuple[str, int, bool]] = []
        self.answered_apply = -1

    async def all(self, make, kind=None, behind=None) -> list[PNodeReply]:
        request = make("p0")
        assert behind == ("ApplyStep" if self.sent and self.sent[-1][0] == "ApplyStep" and request.type == "RunStep" else None)
        self.sent.append((request.type, request.step, self.answered_apply == request.step - 1))
        await asyncio.sleep(ROUND_TRIP_S)
        if request.type == "ApplyStep":
            self.answered_apply = request.step
            return [PNodeReply(ok=True, pnode="p0", step=request.step)]
        return [PNodeReply(ok=True, pnode="p0", step=request.step, micro_losses={0: 2.0 + request.step}, tokens=1,
                           grad_sq_norms={"v": 1.0})]


class Checks:
    def pick(self, *_) -> None:
        pass

    def apply_fields(self, _) -> dict:
        return {}

    def launch(self, _) -> None:
        pass


def training_step() -> tuple[TrainingStep, PNodes, Recorder]:
    recorder, pnodes = Recorder(), PNodes()
    return TrainingStep(recorder, pnodes, dynamic_scaling=False, checks=Checks()), pnodes, recorder


async def test_the_next_steps_run_step_goes_out_behind_this_steps_apply_and_is_used():
    step, pnodes, recorder = training_step()
    await step.run(0, then_next=True)
    await step.run(1, then_next=False)
    assert [(kind, s) for kind, s, _ in pnodes.sent] == [("RunStep", 0), ("ApplyStep", 0), ("RunStep", 1), ("ApplyStep", 1)]
    assert pnodes.sent[2] == ("RunStep", 1, False), "sent before step 0's ApplyStep was answered"
    assert [(e.step, e.loss) for e in recorder.recorded if isinstance(e, StepCompleted)] == [(0, 2.0), (1, 3.0)]
    assert step.ahead is None


async def test_a_run_step_sent_ahead_is_dropped_when_the_loop_goes_elsewhere():
    step, pnodes, recorder = training_step()
    await step.run(0, then_next=True)
    step.drop_ahead()  # say, a pause recorded meanwhile: the loop checkpoints (and the pass gives way)
    assert step.ahead is None
    await step.run(1, then_next=True)  # after the pause: asked again
    await step.run(5)  # a rollback went back to another step: the one sent ahead is not its
    assert [(kind, s) for kind, s, _ in pnodes.sent] == [
        ("RunStep", 0), ("ApplyStep", 0), ("RunStep", 1), ("RunStep", 1), ("ApplyStep", 1), ("RunStep", 2),
        ("RunStep", 5), ("ApplyStep", 5)]


OWN = {"replicas": 2, "micro_batches": 2, "grad_clip": 0.25,
       "sync": ReplicaSync(mode="diloco", inner_steps=4, inner_decisions="own")}


class Replicas:
    """Replica 0's PNode half a round trip away, which works through what it is sent in order (a pass
    takes PASS_S): what was sent, behind what, and how long the PNode sat idle for want of a request."""

    first_replica = ["p0"]

    def __init__(self) -> None:
        self.requests: list = []
        self.sent: list[tuple[str, int, str | None]] = []
        self.idle_s = 0.0
        self.free: asyncio.Future | None = None  # done when the PNode is done with what came before

    async def all(self, make, kind=None, behind=None) -> list[PNodeReply]:
        loop = asyncio.get_running_loop()
        request = make("p0")
        self.requests.append(request)
        self.sent.append((request.type, request.step, behind))
        before, done = self.free, loop.create_future()
        self.free = done
        await asyncio.sleep(ROUND_TRIP_S / 2)
        if before is not None:
            if before.done():
                self.idle_s += loop.time() - before.result()
            await before
        await asyncio.sleep(PASS_S if request.type == "RunStep" else 0.0)
        done.set_result(loop.time())
        await asyncio.sleep(ROUND_TRIP_S / 2)
        return [PNodeReply(ok=True, pnode="p0", step=request.step, micro_losses={0: 2.0 + request.step}, tokens=1,
                           grad_sq_norms={"v": 1.0})]


PASS_S = 4 * ROUND_TRIP_S


async def test_where_replicas_decide_the_update_goes_right_behind_its_pass_and_no_pnode_waits():
    recorder, pnodes = Recorder(**OWN), Replicas()
    step = TrainingStep(recorder, pnodes, dynamic_scaling=False, checks=Checks())
    for k in range(4):
        await step.run(k, then_next=k < 3)
    assert pnodes.sent == [("RunStep", 0, None), ("ApplyStep", 0, "RunStep"), ("RunStep", 1, "ApplyStep"),
                           ("ApplyStep", 1, "RunStep"), ("RunStep", 2, "ApplyStep"), ("ApplyStep", 2, "RunStep"),
                           ("RunStep", 3, "ApplyStep"), ("ApplyStep", 3, "RunStep")]
    assert pnodes.idle_s < ROUND_TRIP_S / 2, f"the PNode waited {pnodes.idle_s:.3f}s for the orchestrator in 4 steps"
    updates = [r for r in pnodes.requests if r.type == "ApplyStep"]
    assert all(u.replica_max_norm == 0.25 for u in updates), "the PNodes decide the clip, with the session's bound"
    completed = [e for e in recorder.recorded if isinstance(e, StepCompleted)]
    assert [(e.step, e.loss, e.grad_norm, e.clipped) for e in completed] == [(k, 2.0 + k, 1.0, True) for k in range(4)]
    assert step.ahead is None

    shared, waiting = Recorder(), Replicas()  # the orchestrator decides: a round trip between a pass and its update
    decided_here = TrainingStep(shared, waiting, dynamic_scaling=False, checks=Checks())
    for k in range(4):
        await decided_here.run(k, then_next=k < 3)
    assert waiting.idle_s > 3 * ROUND_TRIP_S * 0.9, f"{waiting.idle_s:.3f}s idle"


def test_replicas_cannot_decide_their_steps_under_a_dynamic_loss_scale():
    with pytest.raises(SessionError, match="inner_decisions: own needs a fixed loss scale"):
        TrainingStep(Recorder(**OWN), Replicas(), dynamic_scaling=True, checks=Checks())
