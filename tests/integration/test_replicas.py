"""Data-parallel replicas on real processes and a real NATS: any replica count gives the bits of one
pipeline, a PNode joining adds a replica at a checkpoint boundary, and losing a PNode of one
replica (or, with `replicas: auto`, so many that R must shrink) still ends with the clean run's
losses and final parameters.

The learning rate is constant after warm-up (`min_lr == peak`), so a session's first N steps do
not depend on how many steps it was set to run: one clean run is the reference for every prefix.
"""

from computeall.cli.follow import start_session
from computeall.cli.session_view import session_events
from computeall.cli.supervisor import ServiceSpec
from computeall.protocol.commands import StopSession
from computeall.protocol.config import LrSchedule, PipelineConfig
from computeall.protocol.events import (
    Allocated, CheckpointCommitted, Reallocated, RolledBack, SessionStopped, StepCompleted,
)

from .cluster import running_cluster, wait_for_pnodes
from .sessions import command, config, run_to_end, wait_for

SHORT = 10
KILLED = 30


def cfg(steps: int, replicas: int | str = 1, **extra):
    return config(steps=steps, micro_batches=4, batch_size=8, replicas=replicas, checkpoint_every=5,
                  lr=LrSchedule(peak=3e-3, warmup_steps=3, min_lr=3e-3), **extra)


async def history(client, sid: str):
    """Losses in log order, each checkpoint's VNode digests by step, and every payload."""
    payloads = [e.payload for _, e in await session_events(client, sid)]
    losses = [(p.step, p.loss) for p in payloads if isinstance(p, StepCompleted)]
    digests = {p.step: {o.vnode: o.digest for o in p.objects} for p in payloads if isinstance(p, CheckpointCommitted)}
    return losses, digests, payloads


async def run(client, steps: int, replicas: int | str = 1, **extra):
    return await history(client, await run_to_end(client, cfg(steps, replicas, **extra)))


def allocations(payloads) -> list[Allocated]:
    return [p for p in payloads if isinstance(p, Allocated)]


def add_pnodes(supervisor, names: list[str]) -> None:
    supervisor.start([ServiceSpec(n, "pnode", ["--name", n, "--processes-on-machine", "4"]) for n in names])


async def test_any_replica_count_gives_the_same_bits_and_a_join_adds_a_replica(tmp_path):
    async with running_cluster(tmp_path, pnodes=2) as (client, supervisor):
        one = await run(client, SHORT, replicas=1)
        two = await run(client, SHORT, replicas=2)

        # replicas: auto on 2 PNodes is 2 replicas; 2 more PNodes join: 4 replicas from a checkpoint on
        sid, _ = await start_session(client, cfg(100_000, replicas="auto"))
        await wait_for(client, sid, lambda s: s.next_step >= 3)
        add_pnodes(supervisor, ["pnode-2", "pnode-3"])
        grown = await wait_for(client, sid, lambda s: len(s.pnodes) == 4, timeout=180)
        await wait_for(client, sid, lambda s: s.next_step >= max(grown.next_step + 6, 2 * SHORT))
        await command(client, sid, StopSession())
        await wait_for(client, sid, lambda s: s.status == "stopped")
        joined = await history(client, sid)
        stopped_at = next(p.step for p in joined[2] if isinstance(p, SessionStopped))

        clean = await run(client, stopped_at, replicas=1)  # one pipeline over all four PNodes
        four = await run(client, SHORT, replicas=4)
        two_wide = await run(client, SHORT, replicas=2, pipeline=PipelineConfig(schedule="gpipe"))  # 2 stages each
        # a compressing wire rounds on every edge, inside a replica as in one pipeline: still the same bits
        one_int8 = await run(client, SHORT, replicas=1, wire="int8")
        two_wide_int8 = await run(client, SHORT, replicas=2, wire="int8")

    # the same losses and final state (weights and optimizer) whatever the replica count and placement
    for got in (two, four, two_wide):
        assert got[0] == one[0] == clean[0][:SHORT]
        assert got[1][SHORT] == one[1][SHORT] == clean[1][SHORT]
    assert two_wide_int8[:2] == one_int8[:2] and one_int8[0] != one[0]
    assert [(a.replicas, len(a.pnodes)) for a in (allocations(r[2])[0] for r in (one, two, four, two_wide, one_int8,
                                                                                  two_wide_int8))] == [
        (1, 2), (2, 2), (4, 4), (2, 4), (1, 4), (2, 4)]
    wide = [{pl.pnode for pl in allocations(two_wide[2])[0].placements if pl.replica == r} for r in (0, 1)]
    assert len(wide[0]) == len(wide[1]) == 2 and not wide[0] & wide[1]  # which two: the PNodes' measured speeds
    reduced = [p.reduce_bytes for p in two[2] if isinstance(p, StepCompleted)]
    assert all(b > 0 for b in reduced) and not any(p.reduce_bytes for p in one[2] if isinstance(p, StepCompleted))

    # the join: at a checkpoint boundary, nothing rolled back, and the clean run's bits all along
    first, *moved = allocations(joined[2])  # the two may join at one boundary or at two
    assert first.replicas == 2 and moved[-1].replicas == 4 and all("joined" in m.reason for m in moved)
    for m in moved:
        at = joined[2].index(m)
        steps_before = sum(isinstance(p, StepCompleted) for p in joined[2][:at])
        last_commit = [p for p in joined[2][:at] if isinstance(p, CheckpointCommitted)][-1]
        assert last_commit.step == steps_before and steps_before % 5 == 0, "moved through a checkpoint of that step"
    assert not any(isinstance(p, RolledBack) for p in joined[2])
    assert joined[0] == clean[0] and joined[1][stopped_at] == clean[1][stopped_at]


async def test_losing_pnodes_of_replicas_ends_with_the_clean_runs_bits(tmp_path):
    async with running_cluster(tmp_path, pnodes=4) as (client, supervisor):
        clean = await run(client, KILLED)

        # kill -9 of a PNode of one replica (the supervisor starts it again): reallocate, roll back
        sid, _ = await start_session(client, cfg(KILLED, replicas=2))
        await wait_for(client, sid, lambda s: s.next_step >= 7)
        supervisor.services["pnode-1"].process.kill()
        await wait_for(client, sid, lambda s: s.status == "completed", timeout=180)
        killed = await history(client, sid)

        # replicas: auto on 4 PNodes is 4 replicas; one PNode gone for good: 2 replicas after the rollback
        await wait_for_pnodes(supervisor, ["pnode-1"])
        sid, _ = await start_session(client, cfg(KILLED, replicas="auto"))
        await wait_for(client, sid, lambda s: s.next_step >= 7)
        supervisor.services.pop("pnode-3").process.kill()
        await wait_for(client, sid, lambda s: s.status == "completed", timeout=180)
        shrunk = await history(client, sid)

    for got in (killed, shrunk):
        assert got[0] == clean[0], "every step recorded once, with the clean run's loss"
        assert got[1][KILLED] == clean[1][KILLED], "the same final parameters and optimizer state"
        assert any(isinstance(p, RolledBack) for p in got[2])
    assert [a.replicas for a in allocations(killed[2])][0] == 2
    assert any(p.type == "PNodeLost" and p.pnode == "pnode-1" for p in killed[2])
    replicas = [a.replicas for a in allocations(shrunk[2])]
    assert replicas[0] == 4 and replicas[-1] == 2, replicas
    lost = next(a for a in allocations(shrunk[2]) if isinstance(a, Reallocated) and a.reason.startswith("lost"))
    assert "pnode-3" in lost.reason and "pnode-3" not in lost.pnodes
