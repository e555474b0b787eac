"""When a session samples: every `sample_every` steps and at the end, once per step, never in a replay."""

import asyncio
from types import SimpleNamespace

import pytest

from computeall.orchestrator import samples
from computeall.orchestrator.errors import PNodeFailure
from computeall.orchestrator.samples import Sampler
from computeall.protocol.config import DataConfig, ReplayOf, SessionConfig
from computeall.protocol.events import CheckpointCommitted, EventEnvelope, Sample, SamplesGenerated
from computeall.protocol.pnode_api import PNodeReply
from computeall.protocol.session_state import SessionState


def sampler(**config) -> Sampler:
    settings = {"network_yaml": "name: t\n", "data": DataConfig(files=["a"]), "steps": 10, **config}
    state = SessionState(id="s", config=SessionConfig(**settings))
    placement = SimpleNamespace(session_pnodes=SimpleNamespace(calls=None))
    return Sampler(SimpleNamespace(state=state), placement, checkpoints=None)


def test_every_n_steps_and_the_last_one():
    s = sampler(sample_every=4)
    assert [step for step in range(1, 11) if s.due(step, end=10)] == [4, 8, 10]
    assert not any(sampler().due(step, end=10) for step in range(1, 11))  # sample_every 0: never


def test_a_step_is_sampled_once_even_when_it_runs_again():
    s = sampler(sample_every=4)
    s.recorder.state.apply(EventEnvelope(session_id="s", payload=SamplesGenerated(
        step=8, samples=[Sample(prompt="", text="x", tokens=1)], pnode="p", seconds=0.1)), seq=1)
    assert s.recorder.state.last_sampled_step == 8
    assert [step for step in range(1, 11) if s.due(step, end=10)] == [10]  # after a rollback to 4: not 4, not 8
    s.pending[10] = object()  # asked for already, the reply not in yet
    assert not s.due(10, end=10)


def test_a_replay_does_not_sample():
    replay = sampler(sample_every=2, replay_of=ReplayOf(session_id="o", from_step=0, to_step=4))
    assert not any(replay.due(step, end=4) for step in range(1, 5))


class Writers:
    """The session's PNodes as the sampler calls them: the first asked is lost mid-sample, saying so
    (`PNodeFailure`) or silently (killed: its request is never answered)."""

    def __init__(self, silently: bool) -> None:
        self.silently = silently
        self.asked: list[str] = []
        self.nc = self.subjects = None

    async def one(self, pnode: str, request, timeout: float) -> PNodeReply:
        self.asked.append(pnode)
        if len(self.asked) == 1:
            if self.silently:
                await asyncio.Event().wait()
            raise PNodeFailure([pnode], f"{pnode} went silent")
        return PNodeReply(ok=True, pnode=pnode, samples=[[1, 2]])


@pytest.mark.parametrize("silently", [False, True], ids=["saying-so", "killed"])
def test_samples_whose_writer_is_lost_are_written_by_another_from_the_same_checkpoint(monkeypatch, silently):
    async def decoded(nc, subjects, owner, dataset, tokens, timeout):
        return ["text"] * len(tokens)

    monkeypatch.setattr(samples, "decode_tokens", decoded)
    monkeypatch.setattr(samples, "GenerateSamples", lambda **fields: SimpleNamespace(**fields))
    writers, recorded = Writers(silently), []
    state = SessionState(id="s", config=SessionConfig(network_yaml="name: t\n", data=DataConfig(files=["a"]), steps=30,
                                                      sample_every=10, sample_prompts=["def "]))
    state.apply(EventEnvelope(session_id="s", payload=CheckpointCommitted(step=10, bucket="b", objects=[], seconds=0.1)),
                seq=1)

    async def record(event):
        recorded.append(event)

    live = {"pnode-2": 8, "pnode-0": 4}  # the writer is the PNode with the most memory; pnode-2 dies
    registry = SimpleNamespace(live=lambda: [SimpleNamespace(pnode=p) for p in live],
                               memory_bytes=lambda hb: live[hb.pnode], is_live=lambda p: p in live,
                               generation=lambda p: 0)
    placement = SimpleNamespace(session_pnodes=SimpleNamespace(calls=writers), pnodes=["pnode-0", "pnode-2"],
                                dataset="d", registry=registry)
    sampler = Sampler(SimpleNamespace(state=state, record=record), placement, SimpleNamespace(pinned=set()))
    sampler.prompts, sampler.sampling = [[5]], None

    async def story():
        sampler._ask(10)
        await asyncio.sleep(0.01)
        del live["pnode-2"]  # declared lost
        await sampler.record_ready()  # the writer's loss: nothing recorded, the checkpoint kept for another
        assert recorded == [] and sampler.lost == {10} and sampler.checkpoints.pinned == {10}
        await sampler.drain()  # the session's end asks again and waits

    asyncio.run(story())
    assert writers.asked == ["pnode-2", "pnode-0"]
    assert [(e.step, e.pnode, [x.text for x in e.samples]) for e in recorded] == [(10, "pnode-0", ["text"])]
    assert sampler.checkpoints.pinned == set()
