"""A session switches between the fused and the unfused topology at a resume: the checkpoint of one
loads into the other, and the losses match a run that never stopped (to float tolerance)."""


from computeall.cli.follow import start_session
from computeall.cli.session_view import session_events
from computeall.network.per_head import per_head_gpt
from computeall.protocol.commands import PauseSession, ResumeSession
from computeall.protocol.config import DataConfig, LrSchedule, SessionConfig
from computeall.protocol.events import Allocated


from .cluster import running_cluster, stdlib_corpus
from .sessions import command, losses, run_to_end, spread, wait_for

STEPS = 60  # the second pause must land before the session ends: under a loaded suite 20 steps went by first


def config() -> SessionConfig:
    return SessionConfig(
        network_yaml=per_head_gpt(heads=4, blocks=2, dim=64, context=64, vocab=512, name="micro-gpt-heads"),
        data=DataConfig(files=stdlib_corpus()), steps=STEPS, batch_size=8, micro_batches=2, seed=3,
        lr=LrSchedule(peak=3e-3, warmup_steps=3, min_lr=3e-4), min_pnodes=2, keep_checkpoints=10,
        pipeline=spread(),
    )


async def test_fused_to_unfused_and_back_at_resume(tmp_path):
    async with running_cluster(tmp_path, pnodes=2) as (client, _):
        clean = dict(await losses(client, await run_to_end(client, config())))  # fused throughout (the default)

        sid, _ = await start_session(client, config())
        await wait_for(client, sid, lambda s: s.next_step >= 4)
        await command(client, sid, PauseSession())
        first = await wait_for(client, sid, lambda s: s.status == "paused")
        await command(client, sid, ResumeSession(fuse_heads=False))  # the fused checkpoint loads per head
        await wait_for(client, sid, lambda s: s.status == "running" and s.next_step >= first.next_step + 2)
        await command(client, sid, PauseSession())
        second = await wait_for(client, sid, lambda s: s.status == "paused" and s.next_step > first.next_step)
        await command(client, sid, ResumeSession(fuse_heads=True))  # and the per-head checkpoint loads fused
        final = await wait_for(client, sid, lambda s: s.status == "completed", timeout=180)
        resumed = await losses(client, sid)
        allocations = [e.payload for _, e in await session_events(client, sid) if isinstance(e.payload, Allocated)]

    assert final.next_step == STEPS and final.fuse_heads is True
    assert [s for s, _ in resumed] == list(range(STEPS)), "each step recorded exactly once"
    forms = [{p.op for p in a.placements} for a in allocations]
    assert len(forms) == 3
    assert "fused_attention_heads" in forms[0] and "attention_head" not in forms[0]
    assert {"attention_head", "concat_heads"} <= forms[1] and "fused_attention_heads" not in forms[1]
    assert "fused_attention_heads" in forms[2] and "attention_head" not in forms[2]
    assert 0 < first.next_step < second.next_step < STEPS
    for step, loss in resumed:
        assert abs(loss - clean[step]) <= 1e-4 * abs(clean[step]), f"step {step}: resumed {loss} vs clean {clean[step]}"
