"""Placement that uses every PNode usefully, on real processes and a real NATS: the demo on 3 PNodes
(tiny-gpt) gives each a stage with at least half the work of the busiest (what each then waits is
measured by `python -m bench.demo_placement`: a wall-clock share, a benchmark's figure, not a test's);
a PNode that would only add a bubble stands by; and a standby takes a lost PNode's stage as it was,
the others keeping theirs, with the clean run's bits."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))  # `bench` is no package of the distribution

from bench.demo_placement import demo_config  # noqa: E402
from computeall.cli.follow import start_session  # noqa: E402
from computeall.cli.session_view import session_events  # noqa: E402
from computeall.network import Graph, load_network  # noqa: E402
from computeall.protocol.events import Allocated, Reallocated, RolledBack, StepCompleted  # noqa: E402

from .cluster import running_cluster  # noqa: E402
from .sessions import config, final_digests, losses, run_to_end, wait_for  # noqa: E402

pytestmark = pytest.mark.timeout(900)


def roles(allocated: Allocated) -> dict[str, list[str]]:
    """Each PNode's VNodes in replica 0's pipeline; a standby's are none."""
    hosted = {p: [] for p in allocated.standbys}
    for placement in allocated.placements:
        hosted.setdefault(placement.pnode, []).append(placement.vnode)
    return hosted


async def test_the_demo_on_three_pnodes_gives_each_a_stage_of_at_least_half_the_busiest_ones_work(tmp_path):
    demo = demo_config(4)
    async with running_cluster(tmp_path, pnodes=3) as (client, _):
        sid = await run_to_end(client, demo, timeout=600)
        # the same PNodes with one micro-batch each step (the CLI's default): nothing overlaps, so a second
        # stage would only add its hops; one PNode trains and the other two stand by
        single = await run_to_end(client, demo.model_copy(update={"micro_batches": 1, "steps": 2}), timeout=600)
        payloads = {s: [e.payload for _, e in await session_events(client, s)] for s in (sid, single)}

    pipelined, alone = (next(p for p in payloads[s] if isinstance(p, Allocated)) for s in (sid, single))
    assert demo.micro_batches > 1 and demo.pipeline.stages == "auto"
    assert sorted(roles(pipelined)) == ["pnode-0", "pnode-1", "pnode-2"], "every PNode has a role"
    assert len(pipelined.pnodes) == 3 and pipelined.standbys == [], "each PNode's stage shortens the step"
    graph = Graph(load_network(demo.network_yaml))
    work: dict[str, float] = {}
    for placement in pipelined.placements:  # forward and backward FLOPs a token, by the ops' own models
        work[placement.pnode] = work.get(placement.pnode, 0.0) + graph.flops_per_token(placement.vnode)
    assert min(work.values()) >= 0.5 * max(work.values()), f"a stage with less than half the busiest one's work: {work}"

    assert len(alone.pnodes) == 1 and sorted(alone.pnodes + alone.standbys) == ["pnode-0", "pnode-1", "pnode-2"]
    assert {p.pnode for p in alone.placements} == set(alone.pnodes)
    assert all(set(s.compute_s_by_pnode) == set(alone.pnodes) for s in payloads[single] if isinstance(s, StepCompleted))


async def test_a_standby_takes_the_lost_pnodes_stage_and_the_run_keeps_its_bits(tmp_path):
    cfg = config(steps=30, checkpoint_every=5, min_pnodes=3, micro_batches=2, pipeline={"stages": 2})
    async with running_cluster(tmp_path, pnodes=3) as (client, supervisor):
        clean = await run_to_end(client, cfg)
        sid, _ = await start_session(client, cfg)
        placed = await wait_for(client, sid, lambda s: s.next_step >= 7, timeout=240)
        first = next(e.payload for _, e in await session_events(client, sid) if isinstance(e.payload, Allocated))
        (standby,) = first.standbys
        lost = placed.allocation["embed"]  # the first stage's PNode
        supervisor.services.pop(lost).process.kill()  # kill -9, and no restart
        await wait_for(client, sid, lambda s: s.status == "completed", timeout=300)
        clean_losses, got_losses = await losses(client, clean), await losses(client, sid)
        clean_events, events = await session_events(client, clean), await session_events(client, sid)

    moved = next(e.payload for _, e in events if isinstance(e.payload, Reallocated))
    before = {p.vnode: p.pnode for p in first.placements}
    after = {p.vnode: p.pnode for p in moved.placements}
    assert f"standby {standby} took {lost}'s stage" in moved.reason, moved.reason
    assert moved.moves == {v: standby for v, p in before.items() if p == lost} and moved.moves
    assert {v: p for v, p in after.items() if v not in moved.moves} == {v: p for v, p in before.items() if p != lost}, \
        "the other stage keeps its VNodes"
    assert moved.standbys == [] and sorted(moved.pnodes) == sorted(set(first.pnodes) - {lost} | {standby})
    assert any(isinstance(e.payload, RolledBack) for _, e in events)
    assert [s for s, _ in got_losses] == list(range(30)), "every step recorded once"
    assert got_losses == clean_losses
    assert final_digests(events) == final_digests(clean_events), "the same final parameters and optimizer state"
