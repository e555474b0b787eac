"""The distributed run equals the network written with torch's own modules, trained by torch's own
optimizer in one process: same initial weights, same batches, same losses and final parameters.

The outside reference (`computeall.tensorcore.plain_gpt`: nn.Embedding, nn.Linear, nn.RMSNorm,
scaled_dot_product_attention, F.cross_entropy over the tied head's logits; `torch.optim.AdamW`,
`clip_grad_norm_`) shares no op, kernel or optimizer code with the PNodes, so a bug shared by an op
and our own reference model cannot hide here. Both sides compute in fp32 on one thread.

Expected differences, none of them a bug, all of them rounding (a few ulp of fp32, 1e-7 relative):
- the loss: our LM head is chunked, computes its gradients in its forward and sums each row's
  exp-sum its own way, while F.cross_entropy takes log_softmax of the whole logits: other summation
  orders, in the loss and in every gradient that flows back from it (~4e-7 of a gradient's norm);
- the tied weight's two gradients (embedding, head) are summed by our runtime at the end, by
  autograd in its own order; the embedding's backward is an index-put against `embedding_backward`;
- clipping: the orchestrator sums per-VNode squared norms in a fixed order and the PNodes fold the
  factor into AdamW's unscaling divide (g / (1 / c)), where torch multiplies the gradients by c.
Adam turns those last bits into more where a gradient comes within reach of its eps: the update is
lr * m / (sqrt(v) + eps), and on the first step (v = g^2) a weight whose gradient is 1e-9 moves by a
share of lr that a 1e-10 difference changes by 10%. Such weights (and the few whose gradients
depend on them) are expected to differ by more than 1e-6; every other weight must not.
"""

import os

import torch

from computeall.cli.session_checkpoint import read_session_checkpoint
from computeall.network import Graph, load_network
from computeall.protocol.config import DataConfig, LrSchedule, SessionConfig
from computeall.tensorcore.trained_model import checkpoint_weights
from computeall.tensorcore.vnode_runtime import VNodeRuntime

from .cluster import running_cluster, stdlib_corpus
from .reference import ADAM_REACH, fetch_batches, plain_torch_run, run_session
from .sessions import spread
from .test_training_run import NETWORK

STEPS = 20
TOLERANCE = 1e-6
# elements allowed past TOLERANCE that never came within ADAM_REACH themselves (they read one that did)
KNOCK_ON_SHARE = 1e-4
ADAM_BOUND = 1e-4  # what an eps-sensitive weight may still differ by: a small share of one step's lr


def seeded_initial_weights(spec, seed: int) -> dict[str, torch.Tensor]:
    """The weights every PNode starts from: each VNode's seeded init, the data the session trains
    from (built here by the same function, as a PNode would build it)."""
    graph = Graph(spec)
    runtime = VNodeRuntime(graph, graph.order, seed, torch.device("cpu"))
    return {name: p.detach().clone() for name, p in runtime.parameters().items()}


async def test_distributed_run_matches_plain_torch(tmp_path):
    config = SessionConfig(
        network_yaml=NETWORK.read_text(),
        data=DataConfig(files=stdlib_corpus()),
        steps=STEPS, batch_size=8, micro_batches=2, seed=7,
        lr=LrSchedule(peak=3e-3, warmup_steps=3, min_lr=3e-4), min_pnodes=2, grad_clip=0.5, pipeline=spread(),
    )
    spec = load_network(config.network_yaml)
    # every PNode on one thread (cores / cores), as this process below: a reduction split over another
    # number of threads sums in another order
    async with running_cluster(tmp_path, pnodes=2, processes_on_machine=os.cpu_count()) as (client, _):
        run = await run_session(client, config)
        batches = await fetch_batches(client, config, spec)
        final = await read_session_checkpoint(client, run.session_id, None)
    assert len(run.allocated.pnodes) == 2, "the run should really be spread over both PNodes"
    assert final.step == STEPS
    assert any(s.clipped for s in run.steps), "global clipping (grad_clip 0.5) should act on some steps"

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        plain = plain_torch_run(spec, config, batches, seeded_initial_weights(spec, config.seed))
    finally:
        torch.set_num_threads(threads)

    distributed = [s.loss for s in run.steps]
    assert len(distributed) == STEPS
    for step, (d, p) in enumerate(zip(distributed, plain.losses)):
        assert abs(d - p) <= TOLERANCE * abs(p), f"step {step}: distributed {d} vs plain torch {p}"
    assert plain.losses[-1] < plain.losses[0] - 0.5, "the loss should fall: 20 steps that learn nothing compare little"

    trained = checkpoint_weights(spec, final.objects)
    assert sorted(trained) == sorted(plain.weights)
    past, knock_on, elements = {}, 0, 0
    for name, want in plain.weights.items():
        diff = (trained[name] - want).abs()
        elements += diff.numel()
        beyond = diff > TOLERANCE
        sensitive = plain.near_eps[name]
        knock_on += int((beyond & ~sensitive).sum())
        if beyond.any():
            past[name] = f"{int(beyond.sum())} past {TOLERANCE:g} (max {diff.max().item():.2e}), " \
                         f"{int((beyond & sensitive).sum())} of them within {ADAM_REACH:g} of zero once"
        assert diff.max() <= ADAM_BOUND, f"{name}: differs by {diff.max().item():.2e}, past even an eps-sensitive weight's"
    assert knock_on <= KNOCK_ON_SHARE * elements, (
        f"{knock_on} weights differ by more than {TOLERANCE:g} though their gradients never came near AdamW's eps: {past}")
