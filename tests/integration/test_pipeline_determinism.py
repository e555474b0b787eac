"""Placement never changes the math, whatever the schedule and the wire format: every session on
3 PNodes records the losses and final parameters of the same session on 1 PNode, bit for bit
(every PNode with one thread). Compression really compresses: bytes between PNodes shrink with the
wire, and a single PNode sends none. The wire may come from the session (`--wire`) or from the
network YAML (`defaults.wire`, a VNode's own `wire`), and a VNode's own wire holds on its edges
inside one PNode too."""

import asyncio
from typing import NamedTuple

import yaml

from computeall.cli.session_view import session_events
from computeall.protocol.config import PipelineConfig
from computeall.protocol.events import Allocated, StepCompleted

from .cluster import running_cluster
from .sessions import config, final_digests, losses, run_to_end
from .test_training_run import NETWORK


def mixed_network() -> str:
    """micro-gpt with `defaults.wire: bf16` and every block's MLP on `wire: int8`."""
    net = yaml.safe_load(NETWORK.read_text())
    net["defaults"]["wire"] = "bf16"
    block = next(entry["repeat"] for entry in net["vnodes"] if "repeat" in entry)
    next(v for v in block["vnodes"] if v["op"] == "swiglu_mlp")["wire"] = "int8"
    return yaml.safe_dump(net)


class Case(NamedTuple):
    schedule: str
    wire: str | None  # the session's, replacing the network's default
    network: str = "plain"  # or "mixed": the wire comes from the YAML


WIRES = ("fp32", "bf16", "fp16", "int8")
MIXED = [Case("1f1b", None, "mixed"), Case("1f1b", "fp32", "mixed")]
ON_ONE = [Case("1f1b", w) for w in WIRES] + MIXED
ON_THREE = ON_ONE + [Case("gpipe", "fp32"), Case("gpipe", "int8"), Case("gpipe", None, "mixed")]


def case_config(case: Case, pnodes: int):
    network = {"network_yaml": mixed_network()} if case.network == "mixed" else {}
    return config(steps=3, batch_size=8, micro_batches=4, checkpoint_every=0, min_pnodes=pnodes, wire=case.wire,
                  pipeline=PipelineConfig(schedule=case.schedule), **network)


async def outcomes(client, cases: list[Case], pnodes: int) -> dict:
    async def one(case: Case):
        sid = await run_to_end(client, case_config(case, pnodes))
        events = await session_events(client, sid)
        placed = [e.payload for _, e in events if isinstance(e.payload, Allocated)]
        assert len(placed) == 1 and len(placed[0].pnodes) == pnodes, f"{case}: placed {placed}"
        wire_bytes = [e.payload.wire_bytes for _, e in events if isinstance(e.payload, StepCompleted)]
        return case, (await losses(client, sid), final_digests(events), wire_bytes)

    return dict(await asyncio.gather(*(one(c) for c in cases)))


async def test_one_and_three_pnodes_agree_bit_for_bit_for_every_schedule_and_wire(tmp_path):
    async with running_cluster(tmp_path / "three", pnodes=3) as (client, _):
        three = await outcomes(client, ON_THREE, 3)
    async with running_cluster(tmp_path / "one", pnodes=1, processes_on_machine=3) as (client, _):
        one = await outcomes(client, ON_ONE, 1)

    for case, (got_losses, got_digests, _) in three.items():
        want_losses, want_digests, _ = one[case._replace(schedule="1f1b")]
        assert got_losses == want_losses, f"{case}: losses differ from 1 PNode"
        assert got_digests == want_digests, f"{case}: final parameters differ from 1 PNode"
    for case, (_, _, sent) in one.items():
        assert set(sent) == {0}, f"{case}: one PNode sends nothing"

    def run(wire, network="plain"):
        return three[Case("1f1b", wire, network)]

    exact = run("fp32")
    per_step = {wire: run(wire)[2][-1] for wire in WIRES}
    assert per_step["bf16"] / per_step["fp32"] < 0.52 and per_step["fp16"] / per_step["fp32"] < 0.52
    # int8: a byte a value and one fp32 scale per token's 64-wide row, (64 + 4) / 256 = 0.266, and the frames' headers
    assert per_step["int8"] / per_step["fp32"] < 0.28
    for wire in ("bf16", "fp16", "int8"):
        compressed = run(wire)[0]
        assert compressed != exact[0], f"{wire} changed nothing: is the wire applied?"
        for (_, a), (_, b) in zip(compressed, exact[0]):
            assert abs(a - b) <= 0.02 * b, f"{wire}: loss {a} strays from the uncompressed {b}"

    # the YAML's wire: bf16 by default, int8 out of the MLPs (also where an MLP feeds its own PNode)
    mixed, mixed_fp32 = run(None, "mixed"), run("fp32", "mixed")
    assert mixed[0] != run("bf16")[0], "a VNode's own int8 changed nothing"
    assert per_step["int8"] <= mixed[2][-1] <= per_step["bf16"]
    # the session's wire replaces the network's default, not the MLPs' own
    assert mixed_fp32[0] not in (exact[0], mixed[0])
    assert mixed_fp32[2][-1] <= per_step["fp32"]
