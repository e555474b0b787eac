"""A network with a learned bottleneck (examples/networks/tiny-gpt-wan.yaml at micro-gpt's sizes) on real
PNodes: its bits are the same on 1 PNode and on 2, with 2 replicas, with spot checks, and after a PNode
dies and the session rolls back to its checkpoint and resumes. The bottleneck and its int8 narrow edge
are in the graph, so nothing of that depends on where the cut falls."""

import yaml

from computeall.cli.follow import start_session
from computeall.cli.session_view import session_events
from computeall.protocol.config import VerifyConfig
from computeall.protocol.events import Allocated, RolledBack, VerificationFailed

from .cluster import running_cluster
from .sessions import config, final_digests, losses, run_to_end, wait_for
from .test_training_run import NETWORK

WAN = NETWORK.parent / "tiny-gpt-wan.yaml"
STEPS = 40  # long enough that the kill lands mid-session whatever the machine's speed


def wan_network() -> str:
    """tiny-gpt-wan with micro-gpt's sizes (a bottleneck of rank 4 in a 64-wide stream)."""
    net, micro = yaml.safe_load(WAN.read_text()), yaml.safe_load(NETWORK.read_text())
    net.update(vocab_size=micro["vocab_size"], context=micro["context"])
    net["defaults"].update(micro["defaults"], rank=4)
    return yaml.safe_dump(net)


async def outcome(client, sid):
    events = await session_events(client, sid)
    return await losses(client, sid), final_digests(events), [e.payload for _, e in events]


async def test_one_pnode_two_replicas_checks_and_a_failover_give_the_compressed_networks_bits(tmp_path):
    cfg = config(steps=STEPS, network_yaml=wan_network(), micro_batches=4, checkpoint_every=4, min_pnodes=2)
    async with running_cluster(tmp_path / "one", pnodes=1, processes_on_machine=2) as (client, _):
        one = await outcome(client, await run_to_end(client, cfg.model_copy(update={"min_pnodes": 1})))
    async with running_cluster(tmp_path / "two", pnodes=2) as (client, supervisor):
        two = await outcome(client, await run_to_end(client, cfg))
        replicas = await outcome(client, await run_to_end(client, cfg.model_copy(update={"replicas": 2})))
        checked = await outcome(client, await run_to_end(client, cfg.model_copy(update={"verify": VerifyConfig(rate=0.3)})))
        sid, _ = await start_session(client, cfg)
        await wait_for(client, sid, lambda s: s.next_step >= 8)
        supervisor.services["pnode-1"].process.kill()  # kill -9; the supervisor starts it again
        await wait_for(client, sid, lambda s: s.status == "completed", timeout=180)
        failed_over = await outcome(client, sid)

    placed = next(p for p in two[2] if isinstance(p, Allocated))
    assert len(placed.pnodes) == 2 and len({p.pnode for p in placed.placements}) == 2, "a pipeline over both PNodes"
    assert [s for s, _ in one[0]] == list(range(STEPS))
    for name, run in (("2 PNodes", two), ("2 replicas", replicas), ("spot checks", checked), ("failover", failed_over)):
        assert run[0] == one[0], f"{name}: losses differ from 1 PNode"
        assert run[1] == one[1], f"{name}: final parameters and optimizer state differ from 1 PNode"
    assert not any(isinstance(p, VerificationFailed) for p in checked[2]), "an honest PNode's items recompute exactly"
    assert any(isinstance(p, RolledBack) for p in failed_over[2]), "the kill rolled the session back to a checkpoint"
    first, last = one[0][0][1], sum(loss for _, loss in one[0][-5:]) / 5
    assert last < first - 0.5, f"the compressed network learns: {first:.3f} -> {last:.3f}"

