"""The 8-bit optimizer state keeps placement out of the math: a bf16 session with `optimizer.state: int8`
records on 3 PNodes (and on 2 replicas of them) the losses and final state (every checkpoint object's
digest: weights, 8-bit moments and their scales, the masters' low halves) of the same session on one
PNode, bit for bit, each PNode with the same thread count; and it is another optimizer than the fp32
state's (its losses part from them). `int8-sr` (no master, weights rounded stochastically) too."""

import asyncio

from computeall.cli.session_view import session_events
from computeall.protocol.config import OptimizerConfig

from .cluster import running_cluster
from .sessions import config, final_digests, losses, run_to_end


def int8_config(pnodes: int, state: str = "int8", **overrides):
    return config(steps=4, batch_size=8, micro_batches=4, checkpoint_every=2, min_pnodes=pnodes, precision="bf16",
                  optimizer=OptimizerConfig(state=state), update_ratio_every=2, **overrides)


async def outcome(client, cfg):
    sid = await run_to_end(client, cfg)
    return await losses(client, sid), final_digests(await session_events(client, sid))


async def test_int8_state_gives_the_same_bits_on_one_and_three_pnodes_and_on_replicas(tmp_path):
    async with running_cluster(tmp_path / "three", pnodes=3) as (client, _):
        three, replicas, three_sr = await asyncio.gather(outcome(client, int8_config(3)),
                                                         outcome(client, int8_config(2, replicas=2)),
                                                         outcome(client, int8_config(3, state="int8-sr")))
    async with running_cluster(tmp_path / "one", pnodes=1, processes_on_machine=3) as (client, _):
        one, fp32, one_sr = await asyncio.gather(outcome(client, int8_config(1)),
                                                 outcome(client, int8_config(1, state="fp32")),
                                                 outcome(client, int8_config(1, state="int8-sr")))
    assert three == one, "3 PNodes trained other bits than 1"
    assert replicas == one, "2 replicas trained other bits than 1"
    assert fp32[0][0] == one[0][0] and fp32[0] != one[0], "the int8 state is not the fp32 state's optimizer"
    assert three_sr == one_sr, "3 PNodes trained other bits than 1 with stochastic rounding"
    assert one_sr[0][0] == one[0][0] and one_sr[0] != one[0], "int8-sr rounds otherwise than int8's exact master"
