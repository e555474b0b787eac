"""The replicas' sum on the PNode side, wired in memory through real tensor frames: two and four
replicas end with the bits of one, and diloco's outer step leaves both with the same parameters."""

import asyncio
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from computeall.pnode.transport import Link
from computeall.pnode.member import InputsNeverCame
from computeall.pnode.butterfly import SumAborted
from computeall.pnode.replica_sum import ReplicaSum
from computeall.pnode.routing import TensorRoute
from computeall.protocol.config import OptimizerConfig
from computeall.protocol.pnode_api import BatchSource, LoadPlan, ReplicaPlan
from computeall.protocol.replica_sync import ReplicaSync
from computeall.protocol.wire import Reassembler
from computeall.tensorcore.local_step import local_step
from computeall.tensorcore.optimizer import VNodeOptimizer
from computeall.tensorcore.vnode_runtime import VNodeRuntime
from computeall.tensorcore.tensor_frames import tensor_from_wire

from ..tensorcore.helpers import batch, tiny_graph

CPU = torch.device("cpu")
MICRO = 4


def plans(graph, replicas: int, sync: ReplicaSync) -> list[LoadPlan]:
    assignments = [{v: f"p{r}" for v in graph.order} for r in range(replicas)]
    source = BatchSource(dataset="d", split="train", seed=0, micro_batch_size=2, context=graph.spec.context)
    return [LoadPlan(session_id="s", network=graph.spec.model_dump(), assignment=assignments[r], seed=5, batches=source,
                     micro_batches=MICRO, optimizer=OptimizerConfig(),
                     replicas=ReplicaPlan(index=r, assignments=assignments, sync=sync))
            for r in range(replicas)]


class Wired:
    """`replicas` PNodes, one per replica, each with the whole network, sending frames to each other in memory."""

    def __init__(self, graph, replicas: int, sync: ReplicaSync = ReplicaSync()) -> None:
        self.runtimes = [VNodeRuntime(graph, graph.order, 5, CPU) for _ in range(replicas)]
        self.optimizers = [VNodeOptimizer(r.parameters(), OptimizerConfig(), r.decay_groups()) for r in self.runtimes]
        self.reassemblers = [Reassembler() for _ in range(replicas)]
        self.tamper = lambda pnode, tensor: tensor  # what a test makes of a tensor on its way
        link = Link(self._publish, lambda: 1 << 20, ThreadPoolExecutor(1))
        self.sums = [ReplicaSum(plan, runtime, optimizer, link, self._compute)
                     for plan, runtime, optimizer in zip(plans(graph, replicas, sync), self.runtimes, self.optimizers)]

    async def _publish(self, pnode: str, frames: list[bytes]) -> None:
        r = int(pnode[1:])
        for frame in frames:
            received = self.reassemblers[r].feed(frame)
            if received is not None:
                route = TensorRoute.from_wire(received.key, received.meta)
                self.sums[r].receive(route, self.tamper(pnode, tensor_from_wire(received)))

    @staticmethod
    async def _compute(fn, *args):
        return fn(*args)


def test_two_and_four_replicas_sum_to_the_bits_of_one():
    graph = tiny_graph()
    micro = [batch(graph, n=2, seed=s) for s in range(MICRO)]
    one = VNodeRuntime(graph, graph.order, 5, CPU)
    local_step(one, micro)
    for replicas in (2, 4):
        wired = Wired(graph, replicas)

        async def step():
            for r, (runtime, sums) in enumerate(zip(wired.runtimes, wired.sums)):
                sums.begin(0, deadline_s=30)
                size = MICRO // replicas
                local_step(runtime, micro, block=range(r * size, (r + 1) * size))
            return await asyncio.gather(*(s.finish() for s in wired.sums))

        sent = asyncio.run(step())
        for name, p in one.parameters().items():
            for runtime in wired.runtimes:
                assert torch.equal(runtime.parameters()[name].grad, p.grad), (replicas, name)
        gradient_bytes = sum(p.numel() * p.element_size() for p in one.parameters().values())
        rounds = replicas.bit_length() - 1  # log2(R) rounds, the whole gradient each (and the frames' headers)
        assert len(set(sent)) == 1 and gradient_bytes * rounds < sent[0] < gradient_bytes * rounds * 1.05, sent


def test_a_sum_started_from_the_compute_threads_summand_has_the_same_bits():
    """The stage hands each VNode's flat gradient over as soon as it is final, so its sum starts
    while the rest of the backward computes: nothing before the block is done, the same bits after."""
    graph = tiny_graph()
    micro = [batch(graph, n=2, seed=s) for s in range(MICRO)]
    one = VNodeRuntime(graph, graph.order, 5, CPU)
    local_step(one, micro)
    wired = Wired(graph, 2)

    async def step():
        for r, (runtime, sums) in enumerate(zip(wired.runtimes, wired.sums)):
            sums.begin(0, deadline_s=30)
            runtime.start_step(range(2 * r, 2 * r + 2), MICRO)
            assert all(sums.summand(v) is None for v in graph.order), "no gradient is final before its backward"
            local_step(runtime, micro, block=range(2 * r, 2 * r + 2))
            for vid in reversed(graph.order):  # as the backward pass finishes them
                if (flat := sums.summand(vid)) is not None:
                    sums.start(0, vid, flat)
            assert sums.tasks, "the sums started from the summands, before finish"
        return await asyncio.gather(*(s.finish() for s in wired.sums))

    asyncio.run(step())
    for name, p in one.parameters().items():
        for runtime in wired.runtimes:
            assert torch.equal(runtime.parameters()[name].grad, p.grad), name


def test_a_partner_that_never_answers_fails_the_step_in_time_and_a_wrong_shape_says_so():
    graph = tiny_graph()
    micro = [batch(graph, n=2, seed=s) for s in range(MICRO)]
    wired = Wired(graph, 2)

    async def alone():
        wired.sums[0].begin(0, deadline_s=0.5)
        local_step(wired.runtimes[0], micro, block=range(0, 2))
        await wired.sums[0].finish()

    with pytest.raises(InputsNeverCame, match="did not arrive from the other replica in time"):  # answered `starved`
        asyncio.run(alone())

    wired = Wired(graph, 2)

    async def wrong_shape():
        for s in wired.sums:
            s.begin(0, deadline_s=5)
        wired.tamper = lambda pnode, tensor: tensor[:-1] if pnode == "p0" else tensor
        local_step(wired.runtimes[0], micro, block=range(0, 2))
        local_step(wired.runtimes[1], micro, block=range(2, 4))
        await asyncio.gather(*(s.finish() for s in wired.sums))

    with pytest.raises(SumAborted, match=r"the sum of embed.s gradients: replica 1 sent torch.float32 \[2047\], "
                                         r"this replica expects"):
        asyncio.run(wrong_shape())


@pytest.mark.parametrize("wire", ["bf16", "int8"])
def test_diloco_outer_step_leaves_every_replica_with_the_same_parameters(wire):
    graph = tiny_graph()
    wired = Wired(graph, 2, ReplicaSync(mode="diloco", inner_steps=2, wire=wire))
    for r, (runtime, optimizer) in enumerate(zip(wired.runtimes, wired.optimizers)):  # two different inner rounds
        for step in range(2):
            local_step(runtime, [batch(graph, n=2, seed=10 * r + step)])
            optimizer.step(1e-2)
    before = [{n: p.detach().clone() for n, p in r.parameters().items()} for r in wired.runtimes]
    assert not all(torch.equal(before[0][n], before[1][n]) for n in before[0])

    async def outer():
        for s in wired.sums:
            s.begin(1, deadline_s=30)
        return await asyncio.gather(*(s.outer_step(1, deadline_s=30) for s in wired.sums))

    sent = asyncio.run(outer())
    params = [r.parameters() for r in wired.runtimes]
    for name in params[0]:
        assert torch.equal(params[0][name], params[1][name]), name
        assert not torch.equal(params[0][name], before[0][name])
    elements = sum(p.numel() for p in params[0].values())
    tensors = sum(1 for vid in graph.order if wired.runtimes[0].gradients.owned.get(vid))  # one per VNode, one frame each
    header = 512  # at most, per frame
    assert sent[0] == sent[1] <= elements * (2 if wire == "bf16" else 1.04) + tensors * header  # fp32 would be 4
