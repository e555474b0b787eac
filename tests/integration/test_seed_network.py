"""The seed's production network (examples/networks/seed-64heads.yaml) trains on three PNodes that
each offer 1.5 GiB, and none of them uses more: 512-token context, 32,768-token vocabulary, 64
per-head attention VNodes fused by the orchestrator, SwiGLU, a tied LM head."""

import math
from pathlib import Path

import pytest

from computeall.network import Graph, load_network_file
from computeall.protocol.config import DataConfig, SessionConfig

from .cluster import running_cluster, stdlib_corpus
from .reference import run_session
from .sessions import spread

SEED = Path(__file__).resolve().parents[2] / "examples" / "networks" / "seed-64heads.yaml"
OFFERED = 1.5 * 2**30


def test_the_seed_network_has_the_production_shape():
    graph = Graph(load_network_file(SEED))
    spec = graph.spec
    assert (spec.context, spec.vocab_size) == (512, 32768)
    heads = [v for v in spec.vnodes if v.op == "attention_head"]
    assert len(heads) == 64 and {v.params["head_dim"] for v in heads} == {32}
    assert {v.params["dim"] for v in heads} == {512}
    assert sum(1 for v in spec.vnodes if v.op == "swiglu_mlp") == 4
    assert spec.vnode("head").tie == "embed"
    assert sum(graph.param_count(v) for v in graph.order) == 29_381_120


@pytest.mark.slow
async def test_two_steps_on_three_pnodes_within_their_memory(tmp_path):
    # micro-batches, as a pipeline over 3 PNodes is run: with one, the step-time allocator rightly
    # packs nearly the whole network on one PNode (splitting would only add link time); the memory
    # model takes each PNode's own footprint off its offer (`Heartbeat.process_bytes`) but does not
    # count backward's working memory
    config = SessionConfig(network_yaml=SEED.read_text(), data=DataConfig(files=stdlib_corpus()), steps=2,
                           batch_size=8, micro_batches=4, seed=1, min_pnodes=3, update_ratio_every=1,
                           pipeline=spread())
    async with running_cluster(tmp_path, pnodes=3, pnode_memory="1.5GiB") as (client, supervisor):
        run = await run_session(client, config)
        allocated, steps = run.allocated, run.steps
        peaks = {name: supervisor.peak_rss_bytes(name) for name in allocated.pnodes}
    ops = {p.vnode: p.op for p in allocated.placements}
    assert len(allocated.pnodes) == 3
    assert [ops[f"b{i}.attn"] for i in range(4)] == ["fused_attention_heads"] * 4, "head fusion rewrote it"
    assert "attention_head" not in ops.values()
    assert sum(p.params for p in allocated.placements) == 29_381_120
    assert [s.step for s in steps] == [0, 1] and all(math.isfinite(s.loss) for s in steps)
    assert steps[0].loss == pytest.approx(math.log(32768), rel=0.1)  # a fresh model guesses uniformly
    assert all(s.grad_norm is not None for s in steps)
    # every step ran on the three PNodes it was placed on (no failover on the way)
    assert [sorted(s.compute_s_by_pnode) for s in steps] == [sorted(allocated.pnodes)] * 2
    if any(v is None for v in peaks.values()):
        pytest.skip("this kernel does not report a process's peak resident memory (VmHWM)")
    assert all(peak <= OFFERED for peak in peaks.values()), {k: v / 2**20 for k, v in peaks.items()}
