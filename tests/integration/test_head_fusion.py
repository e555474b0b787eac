"""A per-head network trains spread over 3 PNodes, heads of one block on different PNodes, and equals
the fused network in one process: same init, same batches, same losses."""

import torch

from computeall.network import load_network
from computeall.network.head_fusion import fuse_heads
from computeall.network.per_head import per_head_gpt
from computeall.protocol.config import DataConfig, LrSchedule, SessionConfig

from .cluster import running_cluster, stdlib_corpus
from .reference import fetch_batches, reference_losses, run_session
from .sessions import spread

# eight micro-batches: the allocator then balances compute, which cuts inside a block's heads
STEPS, BATCH, MICRO, PNODES = 8, 8, 8, 3
NETWORK = per_head_gpt(heads=4, blocks=2, dim=64, context=64, vocab=512, name="micro-gpt-heads")


def session_config(pnodes: int = PNODES, **extra) -> SessionConfig:
    return SessionConfig(
        network_yaml=NETWORK,
        data=DataConfig(files=stdlib_corpus()),
        steps=STEPS, batch_size=BATCH, micro_batches=MICRO, seed=7,
        lr=LrSchedule(peak=3e-3, warmup_steps=3, min_lr=3e-4), min_pnodes=pnodes,
        pipeline=spread(), **extra,
    )


async def test_per_head_network_spread_over_pnodes_equals_fused_single_process(tmp_path):
    unfused = load_network(NETWORK)
    fused, lines = fuse_heads(unfused)
    assert len(lines) == 2 and all(line.startswith("fused") for line in lines)
    config = session_config(fuse_heads=False)
    async with running_cluster(tmp_path, pnodes=PNODES) as (client, _):
        run = await run_session(client, config)
        allocated, steps = run.allocated, run.steps
        batches = await fetch_batches(client, config, unfused)

    distributed = [s.loss for s in steps]
    where = {p.vnode: p.pnode for p in allocated.placements}
    assert {p.op for p in allocated.placements} >= {"attention_head", "concat_heads"}, "the run must be unfused"
    assert len(allocated.pnodes) == PNODES
    split = [b for b in ("b0", "b1") if len({where[f"{b}.h{h}"] for h in range(4)}) > 1]
    assert split, f"the heads of some block should sit on different PNodes: {where}"

    single_fused = reference_losses(fused, config, batches)
    single_unfused = reference_losses(unfused, config, batches)
    assert len(distributed) == STEPS
    for step, (d, f, u) in enumerate(zip(distributed, single_fused, single_unfused)):
        assert abs(d - u) <= 1e-4 * abs(u), f"step {step}: distributed {d} vs single-process unfused {u}"
        assert abs(d - f) <= 1e-4 * abs(f), f"step {step}: distributed unfused {d} vs single-process fused {f}"
    assert single_fused[-1] < single_fused[0]


async def test_orchestrator_fuses_heads_by_default(tmp_path):
    config = session_config(pnodes=2)
    async with running_cluster(tmp_path, pnodes=2) as (client, _):
        run = await run_session(client, config)
        allocated, steps = run.allocated, run.steps
        batches = await fetch_batches(client, config, load_network(NETWORK))
    losses = [s.loss for s in steps]
    ops = {p.vnode: p.op for p in allocated.placements}
    assert ops["b0.attn"] == ops["b1.attn"] == "fused_attention_heads"
    assert not any(op in ("attention_head", "concat_heads") for op in ops.values())
    reference = reference_losses(load_network(NETWORK), config, batches)  # the unfused network, one process
    for step, (d, r) in enumerate(zip(losses, reference)):
        assert abs(d - r) <= 1e-4 * abs(r), f"step {step}: fused distributed {d} vs unfused single-process {r}"
    assert torch.isfinite(torch.tensor(losses)).all()
