"""The orchestrator's dynamic loss scaler: pure decisions, config, and a rebuild from events."""

import pytest

from computeall.orchestrator.loss_scale import LossScaler, LossScaleState, replay, uses_dynamic_scaling
from computeall.protocol.config import LossScaleConfig, SessionConfig
from computeall.protocol.events import EventEnvelope, LossScaleChanged, StepCompleted, StepSkipped


def test_defaults_follow_the_design():
    c = LossScaleConfig()
    assert (c.initial, c.growth_factor, c.backoff_factor, c.growth_interval) == (2.0**16, 2.0, 0.5, 2000)
    assert LossScaler(c, dynamic=True).scale == 65536.0
    config = SessionConfig(network_yaml="x", data={"files": ["a"]}, steps=1)
    assert config.loss_scale == c
    assert SessionConfig.model_validate({**config.model_dump(), "loss_scale": {"initial": 8, "growth_interval": 3}}).loss_scale.initial == 8
    with pytest.raises(ValueError):
        LossScaleConfig(backoff_factor=1.5)


def test_overflow_skips_and_halves_clean_steps_grow():
    s = LossScaler(LossScaleConfig(initial=1024, growth_interval=3), dynamic=True)
    d = s.update(found_overflow=True)
    assert (d.apply, d.old, d.new, d.reason, d.changed) == (False, 1024, 512, "overflow", True)
    for _ in range(2):
        d = s.update(False)
        assert d.apply and not d.changed and d.new == 512
    d = s.update(False)  # third clean step in a row
    assert (d.apply, d.old, d.new, d.reason) == (True, 512, 1024, "growth")
    assert s.state == LossScaleState(1024, 0)
    s.update(False)
    s.update(False)
    s.update(True)  # an overflow resets the clean count
    assert s.state == LossScaleState(512, 0)
    s.update(False)
    s.update(False)
    assert s.scale == 512


def test_bounds():
    s = LossScaler(LossScaleConfig(initial=2, min_scale=1, max_scale=4, growth_interval=1), dynamic=True)
    assert s.update(True).new == 1
    d = s.update(True)
    assert (d.apply, d.new, d.changed, d.reason) == (False, 1, False, None)  # still skipped at the floor
    assert s.update(False).new == 2
    assert s.update(False).new == 4
    d = s.update(False)
    assert d.new == 4 and not d.changed


def test_fixed_scaler_only_skips():
    s = LossScaler(LossScaleConfig(), dynamic=False)
    assert s.scale == 1.0
    d = s.update(True)
    assert (d.apply, d.new, d.changed) == (False, 1.0, False)
    for _ in range(3000):
        assert s.update(False).new == 1.0


@pytest.mark.parametrize("mode,precisions,dynamic", [
    ("auto", ["fp32", "bf16"], False),
    ("auto", ["bf16", "fp16"], True),
    ("dynamic", ["fp32"], True),
    ("off", ["fp16"], False),
])
def test_when_scaling_is_dynamic(mode, precisions, dynamic):
    assert uses_dynamic_scaling(LossScaleConfig(mode=mode), precisions) is dynamic


def test_replay_rebuilds_the_state_a_driver_left():
    """The driver records, per step: StepSkipped (if skipped), LossScaleChanged (if changed), StepCompleted."""
    config = LossScaleConfig(initial=64, growth_interval=4)
    live = LossScaler(config, dynamic=True)
    events = []
    overflow_at = {2, 3, 11}
    for step in range(15):
        d = live.update(step in overflow_at)
        if not d.apply:
            events.append(StepSkipped(step=step, reason="overflow"))
        if d.changed:
            events.append(LossScaleChanged(step=step, old=d.old, new=d.new, reason=d.reason))
        events.append(StepCompleted(step=step, loss=1.0, tokens=1, step_time_s=0.1, lr=0.1, loss_scale=d.old))
        rebuilt = replay(config, True, events)
        assert rebuilt.state == live.state, step
    # events round-trip through the log's envelope
    for e in events:
        assert EventEnvelope.model_validate_json(
            EventEnvelope(actor="orchestrator", session_id="s", payload=e).model_dump_json()
        ).payload == e
    # resuming from a checkpoint after step 9 (continuing with step 10) forgets later events
    again = LossScaler(config, dynamic=True)
    for step in range(10):
        again.update(step in overflow_at)
    assert replay(config, True, events, before_step=10).state == again.state
