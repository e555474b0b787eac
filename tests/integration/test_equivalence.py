"""The distributed run equals one plain torch model in one process: same init, same batches, same losses."""

import asyncio

import torch

from computeall.cli.follow import follow_session, start_session
from computeall.network import Graph, load_network
from computeall.orchestrator.driver import files_dataset_name
from computeall.protocol.config import DataConfig, LrSchedule, SessionConfig
from computeall.protocol.dataset_api import BatchRequest
from computeall.protocol.dataset_client import fetch_batch
from computeall.protocol.events import Allocated, EventEnvelope, StepCompleted
from computeall.protocol.wire import Tensor
from computeall.tensorcore.optimizer import VNodeOptimizer
from computeall.tensorcore.reference_model import ReferenceModel
from computeall.tensorcore.wire import tensor_from_wire

from .cluster import running_cluster, stdlib_corpus
from .test_training_run import NETWORK

STEPS, BATCH, MICRO = 8, 8, 2


async def test_distributed_run_matches_single_process_torch(tmp_path):
    config = SessionConfig(
        network_yaml=NETWORK.read_text(),
        data=DataConfig(files=stdlib_corpus()),
        steps=STEPS, batch_size=BATCH, micro_batches=MICRO, seed=7,
        lr=LrSchedule(peak=3e-3, warmup_steps=3, min_lr=3e-4), min_pnodes=2,
    )
    async with running_cluster(tmp_path, pnodes=2) as (client, _):
        sid, command_id = await start_session(client, config)
        outcome = await asyncio.wait_for(
            follow_session(client.eventlog, sid, STEPS, progress=False, command_id=command_id), 180
        )
        assert outcome.ok, outcome.message
        events = [EventEnvelope.model_validate_json(r.data).payload
                  for r in await client.eventlog.read(client.subjects.session_evt_all(sid))]
        allocated = next(e for e in events if isinstance(e, Allocated))
        assert len(allocated.pnodes) == 2, "the run should really be spread over both PNodes"
        distributed = [e.loss for e in events if isinstance(e, StepCompleted)]
        # the batches the PNodes trained on, asked of the same dataset service
        graph = Graph(load_network(config.network_yaml))
        dataset = files_dataset_name(config.data.files, graph.spec.vocab_size)
        batches = {}
        for step in range(STEPS):
            for micro in range(MICRO):
                request = BatchRequest(dataset=dataset, split="train", seed=config.seed, step=step, micro=micro,
                                       micro_batches=MICRO, batch=BATCH // MICRO, context=graph.spec.context)
                dtype, shape, data = await fetch_batch(client.nc, client.subjects, request, timeout=30)
                batches[(step, micro)] = tensor_from_wire(Tensor("b", dtype, shape, data, {})).long()

    model = ReferenceModel(graph, config.seed)
    optimizer = VNodeOptimizer(model.named_vnode_parameters(), config.optimizer)
    reference = []
    for step in range(STEPS):
        total = 0.0
        for micro in range(MICRO):
            tokens = batches[(step, micro)]
            loss_sum = model(tokens[:, :-1], tokens[:, 1:])
            (loss_sum / (BATCH * graph.spec.context)).backward()
            total += loss_sum.item()
        optimizer.step(config.lr.at(step, STEPS))
        model.zero_grad(set_to_none=True)
        reference.append(total / (BATCH * graph.spec.context))

    assert len(distributed) == STEPS
    for step, (d, r) in enumerate(zip(distributed, reference)):
        assert abs(d - r) <= 1e-4 * abs(r), f"step {step}: distributed {d} vs single-process {r}"
    assert reference[-1] < reference[0]
