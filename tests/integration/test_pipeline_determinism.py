"""Placement never changes the math, whatever the schedule and the wire format: every (schedule,
wire) session on 3 PNodes records the losses and final parameters of the same session on 1 PNode,
bit for bit (every PNode with one thread). Compression really compresses: bytes between PNodes
shrink with the wire, and a single PNode sends none."""

import asyncio

from computeall.cli.session_view import session_events
from computeall.protocol.config import PipelineConfig
from computeall.protocol.events import Allocated, StepCompleted

from .cluster import running_cluster
from .sessions import config, final_digests, losses, run_to_end

WIRES = ("fp32", "bf16", "fp16", "int8")
CASES = [("1f1b", w) for w in WIRES] + [("gpipe", "fp32"), ("gpipe", "int8")]  # (schedule, wire)


def case_config(schedule: str, wire: str, pnodes: int):
    return config(steps=3, batch_size=8, micro_batches=4, checkpoint_every=0, min_pnodes=pnodes, wire=wire,
                  pipeline=PipelineConfig(schedule=schedule))


async def outcomes(client, cases, pnodes: int) -> dict:
    async def one(case):
        sid = await run_to_end(client, case_config(*case, pnodes))
        events = await session_events(client.eventlog, sid)
        placed = [e.payload for _, e in events if isinstance(e.payload, Allocated)]
        assert len(placed) == 1 and len(placed[0].pnodes) == pnodes, f"{case}: placed {placed}"
        wire_bytes = [e.payload.wire_bytes for _, e in events if isinstance(e.payload, StepCompleted)]
        return case, (await losses(client, sid), final_digests(events), wire_bytes)

    return dict(await asyncio.gather(*(one(c) for c in cases)))


async def test_one_and_three_pnodes_agree_bit_for_bit_for_every_schedule_and_wire(tmp_path):
    async with running_cluster(tmp_path / "three", pnodes=3) as (client, _):
        three = await outcomes(client, CASES, 3)
    async with running_cluster(tmp_path / "one", pnodes=1, processes_on_machine=3) as (client, _):
        one = await outcomes(client, [("1f1b", w) for w in WIRES], 1)

    for (schedule, wire), (got_losses, got_digests, _) in three.items():
        want_losses, want_digests, _ = one[("1f1b", wire)]
        assert got_losses == want_losses, f"{schedule}/{wire}: losses differ from 1 PNode"
        assert got_digests == want_digests, f"{schedule}/{wire}: final parameters differ from 1 PNode"
    for wire in WIRES:
        assert set(one[("1f1b", wire)][2]) == {0}, "one PNode sends nothing"

    exact = three[("1f1b", "fp32")]
    per_step = {wire: three[("1f1b", wire)][2][-1] for wire in WIRES}
    assert per_step["bf16"] / per_step["fp32"] < 0.52 and per_step["fp16"] / per_step["fp32"] < 0.52
    assert per_step["int8"] / per_step["fp32"] < 0.27
    for wire in ("bf16", "fp16", "int8"):
        compressed = three[("1f1b", wire)][0]
        assert compressed != exact[0], f"{wire} changed nothing: is the wire applied?"
        for (_, a), (_, b) in zip(compressed, exact[0]):
            assert abs(a - b) <= 0.02 * b, f"{wire}: loss {a} strays from the uncompressed {b}"
