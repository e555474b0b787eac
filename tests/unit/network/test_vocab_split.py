"""Vocabulary split: llama-1b's shape, the rewrite into shards, and a tied unit larger than any PNode
placed over several PNodes once split."""

from pathlib import Path

import pytest

from computeall.network import Graph, NetworkError, load_network, load_network_file
from computeall.network.memory_model import StepShape, stage_memory_bytes
from computeall.network.ops import AttentionParams
from computeall.network.session_graph import session_graph
from computeall.network.vocab_split import split_vocab
from computeall.orchestrator.allocator import AllocationError, PNodeCapacity, allocate
from computeall.protocol.config import DataConfig, SessionConfig

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "networks"
MICRO = (EXAMPLES / "llama-micro.yaml").read_text()


def test_llama_1b_has_the_shape_and_parameter_count_of_llama_3_2_1b():
    spec = load_network_file(EXAMPLES / "llama-1b.yaml")
    graph = Graph(spec)
    assert sum(graph.param_count(v) for v in graph.order) == 1_235_814_400  # Llama-3.2-1B with tied embeddings
    attn = [graph.params(v) for v in graph.order if graph.vnodes[v].op == "attention"]
    assert len(attn) == 16 and {(p.dim, p.heads, p.kv, p.head_dim, p.rope_base) for p in attn} == {(2048, 32, 8, 64, 500000.0)}
    assert {graph.params(v).hidden for v in graph.order if graph.vnodes[v].op == "swiglu_mlp"} == {8192}
    assert (spec.vocab_size, spec.context, graph.vnodes["head"].tie) == (128256, 512, "embed")
    split, lines = split_vocab(spec)
    assert lines == ["split embed and head by vocabulary into 4 shards of 32768 rows"]
    shards = Graph(split)
    assert sum(shards.param_count(v) for v in shards.order) == 1_235_814_400
    assert [shards.param_count(f"embed.shard{s}") for s in range(4)] == [32768 * 2048] * 3 + [(128256 - 3 * 32768) * 2048]


def test_the_rewrite_keeps_ids_downstream_and_moves_values_exactly_between_shards():
    spec = load_network(MICRO.replace("precision: fp32", "precision: fp32\n  wire: bf16"))
    before = spec.model_dump()
    split, _ = split_vocab(spec)
    assert spec.model_dump() == before  # a pure function
    by_id = {v.id: v for v in split.vnodes}
    assert (by_id["embed"].op, by_id["head"].op) == ("embedding_gather", "sharded_ce")  # readers keep their inputs
    assert by_id["embed"].inputs == [f"embed.shard{s}" for s in range(4)] + ["data.tokens"]
    assert by_id["head"].inputs == [f"head.shard{s}" for s in range(4)] + ["data.targets"]
    assert [by_id[f"head.shard{s}"].tie for s in range(4)] == [f"embed.shard{s}" for s in range(4)]
    graph = Graph(split)
    assert {graph.wire(f"{v}.shard{s}") for v in ("embed", "head") for s in range(4)} == {"fp32"}
    assert graph.wire("embed") == "bf16"  # what the blocks read travels as the embedding's output did
    assert by_id["head"].precision == "fp32"  # the statistics, whatever the head's precision
    assert graph.consumers("norm_f") == [f"head.shard{s}" for s in range(4)]  # gradients summed in shard order


def test_a_vocabulary_within_one_shard_stays_as_written_and_a_taken_id_is_said():
    spec = load_network(MICRO.replace("shard_rows: 128", "shard_rows: 512"))
    assert split_vocab(spec) == (spec, [])
    taken = load_network(MICRO.replace("- {id: norm_f, op: rmsnorm, inputs: [b1.res2]}",
                                       "- {id: embed.shard1, op: rmsnorm, inputs: [b1.res2]}\n"
                                       "  - {id: norm_f, op: rmsnorm, inputs: [embed.shard1]}"))
    same, lines = split_vocab(taken)
    assert same is taken and lines == ["left embed and head unsplit: the shards' ids embed.shard1 are taken"]


def test_the_head_and_its_embedding_must_cut_the_vocabulary_alike():
    differs = MICRO.replace("tie: embed}", "tie: embed, shard_rows: 256}")
    with pytest.raises(NetworkError, match=r"vnode 'head', field 'tie': shard_rows 256 differs from 'embed''s 128"):
        load_network(differs)


def test_a_session_runs_the_split_form():
    config = SessionConfig(network_yaml=MICRO, data=DataConfig(files=["corpus.txt"]), steps=1)
    graph, lines = session_graph(config, fuse_heads=True)
    assert "embed.shard3" in graph.vnodes and lines == ["split embed and head by vocabulary into 4 shards of 128 rows"]


def test_a_tied_embedding_and_head_larger_than_any_pnode_is_placed_over_several_once_split():
    spec = load_network(MICRO.replace("vocab_size: 512", "vocab_size: 8192").replace("shard_rows: 128", "shard_rows: 2048"))
    whole, split = Graph(spec), Graph(split_vocab(spec)[0])
    unit = stage_memory_bytes(whole, ["embed", "head"], StepShape(micro_batch_size=4))
    total = stage_memory_bytes(split, split.order, StepShape(micro_batch_size=4))
    room = min(unit - 1, total // 2 + 1)  # none can hold the embedding and its head, nor every shard
    pnodes = [PNodeCapacity(f"p{i}", room) for i in range(4)]
    assert total < 4 * room
    with pytest.raises(AllocationError, match="cannot be split to fit"):
        allocate(whole, pnodes, batch_size=4, micro_batch_size=4)
    placed = allocate(split, pnodes, batch_size=4, micro_batch_size=4)
    hosts = {placed.assignment[f"embed.shard{s}"] for s in range(4)}
    assert len(hosts) >= 2, "the shards should be spread: no PNode holds them all"
    assert all(placed.assignment[f"head.shard{s}"] == placed.assignment[f"embed.shard{s}"] for s in range(4))
    assert all(stage.memory_bytes <= room for stage in placed.stages)


def test_attention_params_say_their_key_value_heads():
    assert AttentionParams(dim=64, heads=4).kv == 4 and AttentionParams(dim=64, heads=4, kv_heads=2).kv == 2
