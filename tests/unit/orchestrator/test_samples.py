"""When a session samples: every `sample_every` steps and at the end, once per step, never in a replay."""

from types import SimpleNamespace

from computeall.orchestrator.samples import Sampler
from computeall.protocol.config import DataConfig, ReplayOf, SessionConfig
from computeall.protocol.events import EventEnvelope, Sample, SamplesGenerated
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
