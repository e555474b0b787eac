"""A Llama-shaped network on the real cluster: grouped-query attention, the RoPE base, the untied head
and a vocabulary in shards give the same losses and final parameters on 3 PNodes as on 1, bit for bit
(every PNode with the threads of one of three processes), with the shards' statistics and
coefficients crossing between PNodes, and lean PNodes deferring the tied gradient; a session whose vocabulary is split starts from an unsplit checkpoint."""

import asyncio
import json
from pathlib import Path

from computeall.cli.session_view import session_events
from computeall.protocol.events import Allocated

from .cluster import running_cluster
from .sessions import config, final_digests, losses, run_to_end, wait_for
from .test_init_from import AT, SOURCE_STEPS, _cli, _create_args

MICRO = (Path(__file__).resolve().parents[2] / "examples" / "networks" / "llama-micro.yaml").read_text()
# four shards of 1,024 rows: heavy enough that the allocator spreads them
TIED = MICRO.replace("vocab_size: 512", "vocab_size: 4096").replace("shard_rows: 128", "shard_rows: 1024")
UNTIED = MICRO.replace("{id: head, op: tied_lm_head_ce, inputs: [norm_f, data.targets], tie: embed}",
                       "{id: head, op: lm_head_ce, inputs: [norm_f, data.targets]}")
# a VNode that recomputes makes its PNode lean: the head shards then give their tied gradient at the
# embedding's backward (`VNodeRuntime.defer_tied_gradients`), with the very bits of "tied"
LEAN = TIED.replace("  precision: fp32", "  precision: fp32\n  recompute: true")
CASES = {"tied": (TIED, None), "tied-bf16": (TIED, "bf16"), "untied": (UNTIED, None), "tied-lean": (LEAN, None)}


async def outcomes(client, pnodes: int) -> dict:
    async def one(name: str):
        network, precision = CASES[name]
        cfg = config(steps=3, batch_size=8, micro_batches=4, checkpoint_every=0, min_pnodes=pnodes,
                     network_yaml=network, precision=precision)
        sid = await run_to_end(client, cfg)
        events = await session_events(client, sid)
        placed = [e.payload for _, e in events if isinstance(e.payload, Allocated)]
        assert len(placed) == 1 and len(placed[0].pnodes) == pnodes, f"{name}: placed {placed}"
        where = {p.vnode: p.pnode for p in placed[0].placements}
        return name, (await losses(client, sid), final_digests(events), where)

    return dict(await asyncio.gather(*(one(name) for name in CASES)))


async def test_a_llama_shaped_network_gives_the_same_bits_on_one_pnode_and_on_three(tmp_path):
    async with running_cluster(tmp_path / "three", pnodes=3) as (client, _):
        three = await outcomes(client, 3)
    async with running_cluster(tmp_path / "one", pnodes=1, processes_on_machine=3) as (client, _):
        one = await outcomes(client, 1)

    for name, (got_losses, got_digests, _) in three.items():
        want_losses, want_digests, _ = one[name]
        assert got_losses == want_losses, f"{name}: losses differ from 1 PNode"
        assert got_digests == want_digests, f"{name}: final parameters differ from 1 PNode"
        assert got_losses[-1][1] < got_losses[0][1], f"{name}: the loss should fall"
    for name in ("tied", "tied-bf16"):
        where = three[name][2]
        shards = {where[f"head.shard{s}"] for s in range(4)}
        assert len(shards | {where["head"]}) >= 2, f"{name}: the statistics never left a PNode ({where})"
        assert all(where[f"embed.shard{s}"] == where[f"head.shard{s}"] for s in range(4))
        assert set(three[name][1]) >= {f"embed.shard{s}" for s in range(4)}  # each shard checkpoints its rows
    assert one["tied"][0] != one["tied-bf16"][0]  # the precision reached the shards
    assert three["tied-lean"][:2] == three["tied"][:2], "deferring the tied gradient changed the bits"


async def test_a_session_starts_from_another_whose_vocabulary_was_not_split(tmp_path):
    """The PNodes cut an unsplit embedding's checkpoint into the new session's shards (rows and Adam
    state): it goes on with the source's loss, to the rounding of the two forms' heads (one softmax
    over the vocabulary there, four folded here)."""
    whole = tmp_path / "llama-whole.yaml"
    whole.write_text(MICRO.replace("shard_rows: 128", "shard_rows: 512"))  # one shard: the embedding as written
    split = tmp_path / "llama-micro.yaml"
    split.write_text(MICRO)
    async with running_cluster(tmp_path / "cluster", pnodes=2) as (client, _):
        source = await run_to_end(client, config(steps=SOURCE_STEPS, checkpoint_every=AT, min_pnodes=2,
                                                 network_yaml=whole.read_text()))
        next_loss = dict(await losses(client, source))[AT]  # step AT ran on the checkpoint's weights
        created = await _cli(tmp_path / "cluster", *_create_args(split, f"{source}@{AT}", "--min-pnodes", "2"))
        assert created.returncode == 0, created.stderr[-2000:]
        sid = json.loads(created.stdout)["session_id"]
        await wait_for(client, sid, lambda s: s.status == "completed")
        [(step, loss)] = await losses(client, sid)
        assert step == 0 and abs(loss - next_loss) <= 1e-5 * next_loss, (loss, next_loss)
        placed = next(e.payload for _, e in await session_events(client, sid) if isinstance(e.payload, Allocated))
        assert {p.vnode for p in placed.placements} >= {f"embed.shard{s}" for s in range(4)}
