"""A step's RunStep goes out right behind the last step's ApplyStep when the loop goes straight on
(one control round trip a step), and is dropped when the loop does something else first."""

from __future__ import annotations

import asyncio

from computeall.orchestrator.step import TrainingStep
from computeall.protocol.config import DataConfig, SessionConfig
from computeall.protocol.events import StepCompleted
from computeall.protocol.pnode_api import PNodeReply
from computeall.protocol.session_state import SessionState

ROUND_TRIP_S = 0.05


class Recorder:
    def __init__(self) -> None:
        self.state = SessionState(id="s", config=SessionConfig(network_yaml="name: t\n", data=DataConfig(files=["a"]), steps=10))
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
