"""The simulated PNode: no torch; its stages pass placeholders along the real routes without
deadlock on any placement, and report the same loss and state wherever the VNodes live."""

import asyncio
import subprocess
import sys

import pytest

from computeall.cli.swarm import micro_gpt
from computeall.network import Graph, load_network
from computeall.pnode import sim_model
from computeall.pnode.sim_stage import SimulatedStage
from computeall.protocol.config import OptimizerConfig
from computeall.protocol.pnode_api import ApplyStep, BatchSource, LoadPlan, RunStep, RunValidation


def test_simulated_pnode_runs_without_torch():
    probe = (
        "import sys\n"
        "from computeall.pnode.__main__ import members, parser, pnode_credential\n"
        "args = parser().parse_args(['--simulate', '--nats', 'nats://127.0.0.1:1', '--name', 'sim-a'])\n"
        "nodes = members(args, [pnode_credential(args)], 1 << 30)\n"
        "print(type(nodes[0]).__name__, 'torch' in sys.modules)\n"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["SimulatedPNode", "False"]


def plan(graph: Graph, assignment: dict[str, str]) -> LoadPlan:
    batches = BatchSource(dataset="d", split="train", seed=1, micro_batch_size=2, context=graph.spec.context)
    return LoadPlan(session_id="s", network=graph.spec.model_dump(), assignment=assignment, seed=4,
                    batches=batches, micro_batches=3, optimizer=OptimizerConfig())


async def run_placement(graph: Graph, assignment: dict[str, str]):
    stages: dict[str, SimulatedStage] = {}
    sent: list[int] = []

    async def send(pnode, real_bytes, route):
        sent.append(real_bytes)
        stages[pnode].receive(route)

    for pnode in sorted(set(assignment.values())):
        stages[pnode] = SimulatedStage(plan(graph, assignment), pnode, 1e13, send)
    replies = await asyncio.wait_for(asyncio.gather(*(s.run_step(RunStep(session_id="s", step=5), 30) for s in stages.values())), 30)
    val = await asyncio.wait_for(asyncio.gather(*(s.run_validation(RunValidation(session_id="s", step=5), 30) for s in stages.values())), 30)
    for s in stages.values():
        s.apply(ApplyStep(session_id="s", step=5, lr=1e-3))
    loss = sum(r.loss_sum or 0 for r in replies) / sum(r.tokens for r in replies)
    val_loss = sum(r.loss_sum or 0 for r in val) / sum(r.tokens for r in val)
    states = {v: st for s in stages.values() for v, st in s.state.items()}
    return loss, val_loss, states, sent


@pytest.mark.parametrize("k", [2, 5])
async def test_any_placement_gives_one_pnodes_loss_and_state(k):
    graph = Graph(load_network(micro_gpt(3)))
    order = graph.order
    whole = await run_placement(graph, {v: "p0" for v in order})
    # contiguous stages, and the tied head back on the embedding's PNode
    split = {v: f"p{min(k - 1, i * k // len(order))}" for i, v in enumerate(order)}
    split["head"] = split["embed"]
    loss, val_loss, states, sent = await run_placement(graph, split)
    assert whole[3] == [] and sent, "one PNode sends nothing; several send placeholders"
    assert (loss, val_loss, states) == whole[:3]
    assert loss == pytest.approx(sim_model.loss_per_token(4, "train", 5, graph.spec.vocab_size))
    assert val_loss != loss
    width = 64 * 2 * graph.spec.context * 4  # dim x micro-batch tokens x fp32
    assert set(sent) == {width}, "each placeholder names its tensor's real byte count"
