"""Mixed precision through the real system: loss scaling decided by the orchestrator for every PNode,
and bf16 / fp16 training that keeps up with fp32."""

import asyncio
import math

from safetensors.torch import load as load_tensors

from computeall.cli.follow import follow_session, start_session
from computeall.cli.session_view import session_events
from computeall.protocol.config import DataConfig, LossScaleConfig, LrSchedule, SessionConfig
from computeall.protocol.events import (
    Allocated,
    CheckpointCommitted,
    LossScaleChanged,
    StepCompleted,
    StepSkipped,
)
from computeall.protocol.session_reads import ReadObject

from .cluster import running_cluster, stdlib_corpus
from .sessions import spread
from .test_training_run import NETWORK


def _config(steps: int, precision: str, **kw) -> SessionConfig:
    return SessionConfig(
        network_yaml=NETWORK.read_text(), data=DataConfig(files=stdlib_corpus()), steps=steps,
        batch_size=8, seed=3, precision=precision, lr=LrSchedule(peak=3e-3, warmup_steps=3, min_lr=3e-4), pipeline=spread(), **kw,
    )


async def _run(client, config: SessionConfig) -> tuple[str, list]:
    sid, command_id = await start_session(client, config)
    outcome = await asyncio.wait_for(
        follow_session(client, sid, config.steps, progress=False, command_id=command_id), 120
    )
    assert outcome.ok, outcome.message
    return sid, [e.payload for _, e in await session_events(client, sid)]


async def test_an_overflowed_step_is_skipped_on_every_pnode_and_the_scale_backs_off(tmp_path):
    """fp16 with an absurd initial scale, global clipping on: step 0's gradients overflow. The
    orchestrator skips it on every PNode, backs off (here by 2^-20 at once), then grows after `growth_interval` clean steps.
    The final checkpoint proves no PNode applied step 0: every parameter's Adam step count is 3 of 4."""
    scaling = LossScaleConfig(initial=2.0**30, backoff_factor=2.0**-20, growth_interval=2)
    config = _config(4, "fp16", loss_scale=scaling, min_pnodes=2)
    async with running_cluster(tmp_path, pnodes=2) as (client, _):
        sid, events = await _run(client, config)
        allocated = next(e for e in events if isinstance(e, Allocated))
        assert len(allocated.pnodes) == 2 and {p.precision for p in allocated.placements} == {"fp16"}
        assert [e.step for e in events if isinstance(e, StepSkipped)] == [0]
        changes = [(e.step, e.old, e.new, e.reason) for e in events if isinstance(e, LossScaleChanged)]
        assert changes == [(0, 2.0**30, 1024.0, "overflow"), (2, 1024.0, 2048.0, "growth")]
        steps = [e for e in events if isinstance(e, StepCompleted)]
        assert [e.step for e in steps] == [0, 1, 2, 3]
        assert [e.loss_scale for e in steps] == [2.0**30, 1024.0, 1024.0, 2048.0]
        assert all(math.isfinite(e.loss) for e in steps)
        # clipping is on (grad_clip 1.0) and the overflow still wins: no norm, no clip on the skipped step;
        # the others have the norm of their unscaled gradients
        assert config.grad_clip == 1.0 and (steps[0].grad_norm, steps[0].clipped) == (None, False)
        assert all(e.grad_norm is not None and 0 < e.grad_norm < 100 for e in steps[1:])
        assert all(e.clipped == (e.grad_norm > 1.0) for e in steps[1:])

        checkpoint = [e for e in events if isinstance(e, CheckpointCommitted)][-1]
        assert checkpoint.step == 4
        counts = {}
        for obj in checkpoint.objects:  # read as the session's owner reads them
            tensors = load_tensors(await client.read_object(ReadObject(session_id=sid, object=obj.object)))
            counts.update({k: float(v) for k, v in tensors.items() if k.endswith(".step")})
        assert counts, "the checkpoint holds optimizer state"
        assert set(counts.values()) == {3.0}, counts  # 4 steps, 1 skipped, everywhere


async def test_bf16_and_fp16_training_reach_the_fp32_loss(tmp_path):
    """Acceptance on micro-gpt (30 steps): bf16, and fp16 with dynamic loss scaling, end within 2%
    of fp32 (mean of the last 5 steps)."""
    steps = 30
    async with running_cluster(tmp_path, pnodes=1) as (client, _):
        runs = {p: (await _run(client, _config(steps, p)))[1] for p in ("fp32", "bf16", "fp16")}
    losses = {p: [e.loss for e in ev if isinstance(e, StepCompleted)] for p, ev in runs.items()}
    scales = {p: [e.loss_scale for e in ev if isinstance(e, StepCompleted)] for p, ev in runs.items()}
    assert all(len(v) == steps for v in losses.values())
    assert set(scales["fp32"]) == set(scales["bf16"]) == {1.0}  # bf16 has fp32's range: no scaling
    assert scales["fp16"][0] == 2.0**16
    final = {p: sum(v[-5:]) / 5 for p, v in losses.items()}
    assert final["fp32"] < losses["fp32"][0] - 0.3
    for p in ("bf16", "fp16"):
        assert abs(final[p] - final["fp32"]) <= 0.02 * final["fp32"], (p, final)
