"""A per-head network trains spread over 3 PNodes, heads of one block on different PNodes, and equals
the fused network in one process: same init, same batches, same losses."""

import asyncio

import pytest
import torch

from computeall.cli.follow import follow_session, start_session
from computeall.network import Graph, load_network
from computeall.network.head_fusion import fuse_heads
from computeall.orchestrator import driver
from computeall.protocol.config import DataConfig, LrSchedule, SessionConfig
from computeall.protocol.dataset_api import BatchRequest
from computeall.protocol.dataset_client import fetch_batch
from computeall.protocol.events import Allocated, EventEnvelope, StepCompleted
from computeall.protocol.wire import Tensor
from computeall.tensorcore.optimizer import VNodeOptimizer
from computeall.tensorcore.reference_model import ReferenceModel
from computeall.tensorcore.wire import tensor_from_wire

from unit.network.heads_yaml import heads_network  # tests/ is on sys.path (rootdir-relative packages)
from .cluster import running_cluster, stdlib_corpus

STEPS, BATCH, MICRO, PNODES = 8, 8, 2, 3
NETWORK = heads_network(heads=4, blocks=2, dim=64, context=64, vocab=512, name="micro-gpt-heads")
HAS_FUSE_FLAG = "fuse_heads" in SessionConfig.model_fields


def session_config(pnodes: int = PNODES, **extra) -> SessionConfig:
    return SessionConfig(
        network_yaml=NETWORK,
        data=DataConfig(files=stdlib_corpus()),
        steps=STEPS, batch_size=BATCH, micro_batches=MICRO, seed=7,
        lr=LrSchedule(peak=3e-3, warmup_steps=3, min_lr=3e-4), min_pnodes=pnodes,
        **extra,
    )


async def run_session(client, config: SessionConfig) -> tuple[Allocated, list[float]]:
    sid, command_id = await start_session(client, config)
    outcome = await asyncio.wait_for(
        follow_session(client.eventlog, sid, STEPS, progress=False, command_id=command_id), 180
    )
    assert outcome.ok, outcome.message
    events = [EventEnvelope.model_validate_json(r.data).payload
              for r in await client.eventlog.read(client.subjects.session_evt_all(sid))]
    allocated = next(e for e in events if isinstance(e, Allocated))
    return allocated, [e.loss for e in events if isinstance(e, StepCompleted)]


async def fetch_batches(client, config: SessionConfig, spec) -> dict:
    name_of = getattr(driver, "files_dataset_name", None) or getattr(driver, "_files_dataset_name")
    dataset = name_of(config.data.files, spec.vocab_size)
    out = {}
    for step in range(STEPS):
        for micro in range(MICRO):
            request = BatchRequest(dataset=dataset, split="train", seed=config.seed, step=step, micro=micro,
                                   micro_batches=MICRO, batch=BATCH // MICRO, context=spec.context)
            dtype, shape, data = await fetch_batch(client.nc, client.subjects, request, timeout=30)
            out[(step, micro)] = tensor_from_wire(Tensor("b", dtype, shape, data, {})).long()
    return out


def reference_losses(spec, config: SessionConfig, batches: dict) -> list[float]:
    graph = Graph(spec)
    model = ReferenceModel(graph, config.seed)
    optimizer = VNodeOptimizer(model.named_vnode_parameters(), config.optimizer)
    losses = []
    for step in range(STEPS):
        total = 0.0
        for micro in range(MICRO):
            tokens = batches[(step, micro)]
            loss_sum = model(tokens[:, :-1], tokens[:, 1:])
            (loss_sum / (BATCH * spec.context)).backward()
            total += loss_sum.item()
        optimizer.step(config.lr.at(step, STEPS))
        model.zero_grad(set_to_none=True)
        losses.append(total / (BATCH * spec.context))
    return losses


async def test_per_head_network_spread_over_pnodes_equals_fused_single_process(tmp_path):
    unfused = load_network(NETWORK)
    fused, lines = fuse_heads(unfused)
    assert len(lines) == 2 and all(line.startswith("fused") for line in lines)
    config = session_config(**({"fuse_heads": False} if HAS_FUSE_FLAG else {}))
    async with running_cluster(tmp_path, pnodes=PNODES) as (client, _):
        allocated, distributed = await run_session(client, config)
        batches = await fetch_batches(client, config, unfused)

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


@pytest.mark.skipif(not HAS_FUSE_FLAG, reason="SessionConfig.fuse_heads is not wired into the orchestrator yet")
async def test_orchestrator_fuses_heads_by_default(tmp_path):
    config = session_config(pnodes=2)
    async with running_cluster(tmp_path, pnodes=2) as (client, _):
        allocated, losses = await run_session(client, config)
        batches = await fetch_batches(client, config, load_network(NETWORK))
    ops = {p.vnode: p.op for p in allocated.placements}
    assert ops["b0.attn"] == ops["b1.attn"] == "fused_attention_heads"
    assert not any(op in ("attention_head", "concat_heads") for op in ops.values())
    reference = reference_losses(load_network(NETWORK), config, batches)  # the unfused network, one process
    for step, (d, r) in enumerate(zip(losses, reference)):
        assert abs(d - r) <= 1e-4 * abs(r), f"step {step}: fused distributed {d} vs unfused single-process {r}"
    assert torch.isfinite(torch.tensor(losses)).all()
