"""The micro-batches a PNode holds at once (`pipeline.in_flight`) only order the work: two real
PNodes (torch stages, frames passed in-process) give the same bits with 1, 2 and 6 in flight."""

import torch

from computeall.pnode import batches
from computeall.protocol.config import PipelineConfig
from computeall.protocol.pnode_api import ApplyStep, RunStep

from .test_step_rerun import SESSION, Bus, all_of, fetch_batch, plan

MICRO_BATCHES = 6


async def two_steps(in_flight: int) -> tuple[list, dict[str, torch.Tensor], int]:
    """Two steps of six micro-batches: the replies of the second, the weights after it, and the most
    micro-batches any PNode held at once."""
    bus = Bus()
    for name in ("a", "b"):
        bus.join(name)
    try:
        loaded = plan().model_copy(update={"micro_batches": MICRO_BATCHES, "pipeline": PipelineConfig(in_flight=in_flight)})
        assert all(r.ok for r in await all_of(bus, loaded))
        assert {p.stages[SESSION].in_flight for p in bus.pnodes.values()} == {in_flight}
        for step in (0, 1):
            replies = await all_of(bus, RunStep(session_id=SESSION, step=step))
            assert all(r.ok for r in replies)
            await all_of(bus, ApplyStep(session_id=SESSION, step=step, lr=1e-2))
        weights = {f"{n}/{k}": v.detach().clone() for n, p in bus.pnodes.items()
                   for k, v in p.stages[SESSION].runtime.parameters().items()}
    finally:
        for pnode in bus.pnodes.values():
            pnode.executor.shutdown(wait=True)
            pnode.closed()
    return replies, weights


async def test_in_flight_changes_the_order_of_work_never_the_bits(monkeypatch):
    monkeypatch.setattr(batches, "fetch_batch", fetch_batch)
    runs = {n: await two_steps(n) for n in (1, 2, 6)}
    replies, weights = runs[2]
    for n in (1, 6):
        ours, our_weights = runs[n]
        for mine, theirs in zip(ours, replies):
            assert (mine.loss_sum, mine.micro_losses, mine.grad_sq_norms) == (
                theirs.loss_sum, theirs.micro_losses, theirs.grad_sq_norms)
        assert our_weights.keys() == weights.keys()
        assert all(torch.equal(our_weights[k], weights[k]) for k in weights), f"in_flight {n} changed the weights"
