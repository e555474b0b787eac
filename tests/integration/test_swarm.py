"""64 simulated PNodes (`computeall pnode --simulate`, no torch) in 8 processes: they join, train a
69-VNode network (micro-gpt's blocks give 3 + 6n VNodes: the first n past 64) for 20 steps and
survive 3 kills of a whole process (8 PNodes at once, kill -9).
The session ends with the losses of a run where nothing happened, each step recorded once, and
every VNode's final state the one the 20 applied steps give: recovery restored the right checkpoints."""

import asyncio

from computeall.cli.follow import follow_session, start_session
from computeall.cli.session_view import session_events
from computeall.cli.swarm import micro_gpt, swarm_names, swarm_services
from computeall.pnode import sim_model
from computeall.pnode.simulated import SimulatedCheckpoint
from computeall.protocol.config import DataConfig, SessionConfig
from computeall.protocol.events import CheckpointCommitted, PNodeLost, Reallocated, RolledBack
from computeall.protocol.session_reads import ReadObject

from .cluster import running_cluster, stdlib_corpus, wait_for_pnodes
from .sessions import losses, spread, wait_for
from .waiting import wait_until_async

PNODES, PROCESSES, STEPS = 64, 8, 20


def busiest_process(state) -> str:
    """The swarm process whose PNodes host the most VNodes now."""
    names = swarm_names(PNODES)
    hosted = {f"swarm-{i}": 0 for i in range(PROCESSES)}
    for pnode in state.allocation.values():
        hosted[f"swarm-{names.index(pnode) % PROCESSES}"] += 1
    return max(hosted, key=hosted.get)


async def test_64_simulated_pnodes_train_and_survive_three_kills(tmp_path):
    async with running_cluster(tmp_path, pnodes=0) as (client, supervisor):
        supervisor.start(swarm_services(supervisor.credentials, PNODES, PROCESSES))
        await wait_for_pnodes(supervisor, swarm_names(PNODES), timeout=120)
        network = micro_gpt(11)  # 69 VNodes (68 units: the head shares the embedding's weight)
        cfg = SessionConfig(network_yaml=network, data=DataConfig(files=stdlib_corpus()), steps=STEPS, seed=7,
                            micro_batches=2, checkpoint_every=3, keep_checkpoints=20, min_pnodes=PNODES,
                            rebalance="on-failure", pipeline=spread())
        sid, command_id = await start_session(client, cfg)
        for kill in range(3):
            state = await wait_for(client, sid, lambda s, k=kill: s.next_step >= 3 + 5 * k and s.allocation, timeout=240)
            victim = busiest_process(state)
            supervisor.services[victim].process.kill()  # kill -9: 8 PNodes gone at once; the supervisor restarts them
            await wait_until_async(lambda k=kill: _recovered(client, sid, k + 1), 240, f"recovery {kill + 1}", interval=0.3)
        outcome = await asyncio.wait_for(follow_session(client, sid, STEPS, progress=False, command_id=command_id), 240)
        assert outcome.ok, outcome.message

        events = [e.payload for _, e in await session_events(client, sid)]
        assert sum(isinstance(e, RolledBack) for e in events) >= 3
        assert len({e.pnode for e in events if isinstance(e, PNodeLost)}) >= 3
        assert all("lost" in e.reason for e in events if isinstance(e, Reallocated))

        vocab = 512
        recorded = await losses(client, sid)
        assert [s for s, _ in recorded] == list(range(STEPS)), "each step recorded once, in order"
        for step, loss in recorded:
            assert abs(loss - sim_model.loss_per_token(cfg.seed, "train", step, vocab)) < 1e-9

        last = [e for e in events if isinstance(e, CheckpointCommitted)][-1]
        assert last.step == STEPS
        for obj in last.objects:  # read through the orchestrator, as a user reads a checkpoint
            saved = SimulatedCheckpoint.model_validate_json(await client.read_object(ReadObject(session_id=sid, object=obj.object)))
            expected = sim_model.initial_state(cfg.seed, obj.vnode)
            for step in range(STEPS):
                expected = sim_model.applied(expected, step, cfg.lr.at(step, STEPS))
            assert saved.state == expected, f"{obj.vnode}: final state differs from a clean run's"


async def _recovered(client, sid: str, times: int) -> bool:
    events = await session_events(client, sid)
    return sum(isinstance(e.payload, RolledBack) for _, e in events) >= times
