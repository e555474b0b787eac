"""The distributed run equals one plain torch model in one process: same init, same batches, same
losses, with the global gradient clipping of torch's `clip_grad_norm_`."""

from computeall.network import load_network
from computeall.protocol.config import DataConfig, LrSchedule, SessionConfig

from .cluster import running_cluster, stdlib_corpus
from .reference import fetch_batches, reference_losses, run_session
from .sessions import spread
from .test_training_run import NETWORK


async def test_distributed_run_matches_single_process_torch(tmp_path):
    config = SessionConfig(
        network_yaml=NETWORK.read_text(),
        data=DataConfig(files=stdlib_corpus()),
        steps=8, batch_size=8, micro_batches=2, seed=7,
        lr=LrSchedule(peak=3e-3, warmup_steps=3, min_lr=3e-4), min_pnodes=2, grad_clip=0.5, pipeline=spread(),
    )
    spec = load_network(config.network_yaml)
    async with running_cluster(tmp_path, pnodes=2) as (client, _):
        allocated, steps = await run_session(client, config)
        batches = await fetch_batches(client, config, spec)
    assert len(allocated.pnodes) == 2, "the run should really be spread over both PNodes"
    reference = reference_losses(spec, config, batches)  # with torch's clip_grad_norm_
    distributed = [s.loss for s in steps]
    assert len(distributed) == config.steps
    assert any(s.clipped for s in steps), "global clipping (grad_clip 0.5) should act on some steps"
    for step, (d, r) in enumerate(zip(distributed, reference)):
        assert abs(d - r) <= 1e-4 * abs(r), f"step {step}: distributed {d} vs single-process {r}"
    assert reference[-1] < reference[0]
