"""Failover with real processes on a real NATS: PNodes die, come back, join, leave and run out,
and each session ends with the losses and final parameters of a run where nothing happened."""

import asyncio
import random
import signal

import pytest

from computeall.cli.follow import start_session
from computeall.cli.session_view import failovers, session_events
from computeall.orchestrator.pnodes import COOL_DOWN_S
from computeall.protocol.events import (
    Allocated, CheckpointCommitted, PNodeLost, Reallocated, RolledBack, SessionPaused, SessionResumed, StepAborted,
)
from computeall.protocol.faults import FaultSpec

from .cluster import extra_pnode, running_cluster, wait_for_pnodes
from .identities import connect_as
from .sessions import config, final_digests, losses, run_to_end, wait_for
from .waiting import exit_code, wait_until_async

STEPS = 60  # long enough that every kill lands mid-session whatever the machine's speed
LONG = 150


async def outcome(client, sid):
    events = await session_events(client, sid)
    return await losses(client, sid), final_digests(events), [e.payload for _, e in events]


def pnode_process(supervisor, name):
    return supervisor.services[name].process


@pytest.fixture
def cfg():
    return config(steps=STEPS, checkpoint_every=5, min_pnodes=3)


async def clean_run(client, cfg):
    sid = await run_to_end(client, cfg)
    return await outcome(client, sid)


async def test_kill_one_then_two_pnodes_same_result_as_clean_run(tmp_path, cfg):
    async with running_cluster(tmp_path, pnodes=3) as (client, supervisor):
        clean_losses, clean_digests, _ = await clean_run(client, cfg)
        sid, _ = await start_session(client, cfg)
        await wait_for(client, sid, lambda s: s.next_step >= 8)
        pnode_process(supervisor, "pnode-1").kill()  # kill -9; the supervisor starts it again
        await wait_for(client, sid, lambda s: s.next_step >= 18, timeout=120)
        pnode_process(supervisor, "pnode-2").kill()
        await wait_for(client, sid, lambda s: s.status == "completed", timeout=180)
        got_losses, got_digests, events = await outcome(client, sid)
    assert [s for s, _ in got_losses] == list(range(STEPS)), "every step recorded once"
    assert got_losses == clean_losses
    assert got_digests == clean_digests, "the same final parameters and optimizer state"
    rollbacks = [e for e in events if isinstance(e, RolledBack)]
    assert len(rollbacks) == 2 and all(r.to_step % 5 == 0 and r.from_step - r.to_step <= 5 for r in rollbacks)
    lost = [e.pnode for e in events if e.type == "PNodeLost"]
    assert lost == ["pnode-1", "pnode-2"]
    assert any(isinstance(e, StepAborted) for e in events)
    shown = failovers(events)  # what `computeall session show SID --json` lists
    assert [f["lost"] for f in shown] == [["pnode-1"], ["pnode-2"]]
    assert all(f["moves"] and f["steps_rerun"] == r.from_step - r.to_step for f, r in zip(shown, rollbacks))


async def test_kill_during_a_checkpoint_write_never_uses_it(tmp_path, cfg):
    async with running_cluster(tmp_path, pnodes=3) as (client, supervisor):
        clean_losses, clean_digests, _ = await clean_run(client, cfg)
        # pnode-x takes the checkpoint write of step 10 and never answers it, writing nothing of it, and is
        # killed then: the others' parts of step 10 are written, its part never is (a PNode killed as the
        # request arrived could write its small part and answer first: the loaded suite saw that race)
        hostage = extra_pnode(supervisor, "pnode-x", tmp_path, "--fault", "mute:SaveCheckpoint@10")
        killed = asyncio.Event()

        async def kill_on_save(msg) -> None:
            if b'"SaveCheckpoint"' in msg.data and b'"step":10' in msg.data.replace(b" ", b"") and not killed.is_set():
                hostage.kill()
                killed.set()

        try:
            await wait_for_pnodes(supervisor, ["pnode-x"])
            tap = await connect_as(supervisor.credentials, "pnode", "pnode-x")  # pnode-x's own subjects
            await tap.subscribe(client.subjects.pnode_ctl("pnode-x"), cb=kill_on_save)
            sid, _ = await start_session(client, cfg.model_copy(update={"min_pnodes": 4}))
            await wait_for(client, sid, lambda s: "pnode-x" in s.allocation.values(), timeout=120)
            await asyncio.wait_for(killed.wait(), 120)
            await tap.close()
            await wait_for(client, sid, lambda s: s.status == "completed", timeout=180)
            got_losses, got_digests, events = await outcome(client, sid)
        finally:
            hostage.kill()
            await exit_code(hostage, 30)
    commits = [e for e in events if isinstance(e, CheckpointCommitted)]
    rollback = next(e for e in events if isinstance(e, RolledBack))
    assert rollback.to_step == 5, "back to the last committed checkpoint, not the half-written one"
    first_commit_at_10 = next(i for i, e in enumerate(events) if isinstance(e, CheckpointCommitted) and e.step == 10)
    assert first_commit_at_10 > events.index(rollback), "step 10 was committed only after the re-run"
    assert len(commits) == STEPS // 5
    assert got_losses == clean_losses and got_digests == clean_digests


async def test_join_and_graceful_leave(tmp_path):
    cfg = config(steps=LONG, checkpoint_every=5, min_pnodes=3)  # long enough for a PNode to start meanwhile
    async with running_cluster(tmp_path, pnodes=3) as (client, supervisor):
        clean_losses, clean_digests, _ = await clean_run(client, cfg)
        sid, _ = await start_session(client, cfg)
        await wait_for(client, sid, lambda s: s.next_step >= 3)
        fourth = extra_pnode(supervisor, "pnode-x", tmp_path)
        try:
            await wait_for_pnodes(supervisor, ["pnode-x"])
            await wait_for(client, sid, lambda s: "pnode-x" in s.allocation.values(), timeout=120)
            leaver = supervisor.services.pop("pnode-2")  # not restarted: it leaves for good
            leaver.process.send_signal(signal.SIGTERM)
            await wait_for(client, sid, lambda s: "pnode-2" not in s.allocation.values(), timeout=120)
            assert await exit_code(leaver.process, 60) == 0, "the leaving PNode exits once its VNodes moved"
            await wait_for(client, sid, lambda s: s.status == "completed", timeout=180)
            got_losses, got_digests, events = await outcome(client, sid)
        finally:
            fourth.send_signal(signal.SIGTERM)
            await exit_code(fourth, 30)
    reasons = [e.reason for e in events if isinstance(e, Reallocated)]
    assert any("joined" in r for r in reasons) and any("pnode-2 leaving" in r for r in reasons)
    assert not any(isinstance(e, (RolledBack, StepAborted)) for e in events), "joining and leaving lose no step"
    assert got_losses == clean_losses and got_digests == clean_digests


async def test_capacity_exhausted_pauses_and_resumes_when_a_pnode_joins(tmp_path):
    cfg = config(steps=LONG, checkpoint_every=5, min_pnodes=3)
    async with running_cluster(tmp_path, pnodes=3) as (client, supervisor):
        clean_losses, clean_digests, _ = await clean_run(client, cfg)
        sid, _ = await start_session(client, cfg)
        await wait_for(client, sid, lambda s: s.next_step >= 6)
        for name in ("pnode-0", "pnode-1", "pnode-2"):  # every PNode gone: nothing can hold the network
            supervisor.services.pop(name).process.kill()
        paused = await wait_for(client, sid, lambda s: s.status == "paused", timeout=60)
        assert paused.auto_resume and "not enough capacity" in paused.pause_reason
        helper = extra_pnode(supervisor, "pnode-new", tmp_path)
        try:
            await wait_for(client, sid, lambda s: s.status == "completed", timeout=180)
            got_losses, got_digests, events = await outcome(client, sid)
        finally:
            helper.send_signal(signal.SIGTERM)
            await exit_code(helper, 30)
    assert any(isinstance(e, SessionPaused) and e.auto_resume for e in events)
    assert got_losses == clean_losses and got_digests == clean_digests


async def test_a_lone_pnode_too_slow_to_answer_gets_its_session_back_after_a_cool_down(tmp_path):
    """pnode-0, the only PNode, takes the ApplyStep of step 3 and never answers, heartbeating on, as a
    PNode on a machine busy beyond its allowance does: it is treated as lost and the session pauses for
    capacity; once the PNode's cool-down ends, the session resumes on it (the fault lasts, so it is lost
    again then, for twice as long)."""
    async with running_cluster(tmp_path, pnodes=1, faults={"pnode-0": FaultSpec.parse("mute:ApplyStep@3")}) as (client, _):
        sid, _ = await start_session(client, config(steps=12, checkpoint_every=2, min_pnodes=1))
        paused = await wait_for(client, sid, lambda s: s.status == "paused", timeout=120)
        assert paused.auto_resume and "not enough capacity" in paused.pause_reason

        async def placed_again() -> list:
            events = [e.payload for _, e in await session_events(client, sid)]
            resumed = next((i for i, e in enumerate(events) if isinstance(e, SessionResumed)), len(events))
            return events if any(isinstance(e, (Allocated, Reallocated)) for e in events[resumed:]) else []

        events = await wait_until_async(placed_again, COOL_DOWN_S + 60, "the session resumed and placed again")
    pause = next(i for i, e in enumerate(events) if isinstance(e, SessionPaused))
    assert [e.pnode for e in events[:pause] if isinstance(e, PNodeLost)] == ["pnode-0"]
    again = next(e for e in events[pause:] if isinstance(e, (Allocated, Reallocated)))
    assert again.pnodes == ["pnode-0"], "placed on the PNode that cooled down"


async def test_chaos_random_kills_and_restarts(tmp_path):
    cfg = config(steps=LONG, checkpoint_every=5, min_pnodes=3)
    rng = random.Random(7)
    async with running_cluster(tmp_path, pnodes=3) as (client, supervisor):
        clean_losses, clean_digests, _ = await clean_run(client, cfg)
        sid, _ = await start_session(client, cfg)
        for _ in range(3):
            # each kill lands a few steps after the last one, however fast this machine trains
            target = (await wait_for(client, sid, lambda s: True)).next_step + rng.randint(1, 4)
            state = await wait_for(client, sid, lambda s: s.next_step >= target or s.status == "completed")
            if state.status == "completed":
                break
            victim = rng.choice(["pnode-0", "pnode-1", "pnode-2"])
            process = pnode_process(supervisor, victim)
            if process is not None:
                process.kill()
        await wait_for(client, sid, lambda s: s.status == "completed", timeout=300)
        got_losses, got_digests, _ = await outcome(client, sid)
    assert [s for s, _ in got_losses] == list(range(LONG))
    assert got_losses == clean_losses and got_digests == clean_digests
