"""The architecture of the models people use: grouped-query attention, an untied LM head, the RoPE base,
and a Llama-shaped network (`llama-micro`, llama-1b's YAML at toy size) that `transformers` loads as
`LlamaForCausalLM` and computes our logits with."""

import json

import pytest
import torch

import declared

transformers = declared.module("transformers")

from computeall.network.ops import OPS  # noqa: E402
from computeall.protocol.dataset_api import EOT_TOKEN, PAD_TOKEN  # noqa: E402
from computeall.tensorcore.generation import Generator, KVCache  # noqa: E402
from computeall.tensorcore.hf_export import export_llama  # noqa: E402
from computeall.tensorcore.hf_import import WeightsMismatch, llama_objects  # noqa: E402
from computeall.tensorcore.ops.attention import Attention  # noqa: E402
from computeall.tensorcore.trained_model import TrainedModel, inference_network  # noqa: E402

from .trained import checkpoint, network_yaml, tokenizer_json  # noqa: E402

UNTIED = network_yaml("llama-micro").replace(
    "{id: head, op: tied_lm_head_ce, inputs: [norm_f, data.targets], tie: embed}",
    "{id: head, op: lm_head_ce, inputs: [norm_f, data.targets]}")


@pytest.mark.parametrize("heads, kv_heads", [(4, 2), (4, 1), (6, 3)])
def test_grouped_query_attention_is_attention_with_each_kv_head_repeated_over_its_group(heads, kv_heads):
    dim, hd = 8 * heads, 8
    gqa = Attention(dim, heads, kv_heads, rope_base=500000.0)
    gqa.reset_parameters(torch.Generator().manual_seed(0))
    full = Attention(dim, heads, rope_base=500000.0)
    q, k, v = gqa.qkv.weight.detach().split([heads * hd, kv_heads * hd, kv_heads * hd])
    group = heads // kv_heads
    with torch.no_grad():  # key/value head j serves query heads j*group .. (j+1)*group - 1
        full.qkv.weight.copy_(torch.cat([q, *(w.view(kv_heads, hd, dim).repeat_interleave(group, 0).reshape(-1, dim)
                                              for w in (k, v))]))
        full.proj.weight.copy_(gqa.proj.weight)
    x = torch.randn(2, 12, dim, generator=torch.Generator().manual_seed(1), requires_grad=True)
    y_gqa = gqa(x)
    grad_gqa, = torch.autograd.grad(y_gqa.sum(), x)
    y_full = full(x)
    grad_full, = torch.autograd.grad(y_full.sum(), x)
    assert torch.allclose(y_gqa, y_full, atol=1e-6, rtol=0) and torch.allclose(grad_gqa, grad_full, atol=1e-6, rtol=0)
    assert sum(p.numel() for p in gqa.parameters()) == OPS["attention"].param_count(
        OPS["attention"].params(dim=dim, heads=heads, kv_heads=kv_heads))
    assert sum(p.numel() for p in gqa.parameters()) < sum(p.numel() for p in full.parameters())


def test_kv_heads_must_divide_the_query_heads():
    from computeall.network import NetworkError, load_network

    with pytest.raises(NetworkError, match=r"vnode 'b0.attn', field 'kv_heads': 4 query heads do not split into groups over 3"):
        load_network(network_yaml("llama-micro").replace("kv_heads: 2", "kv_heads: 3"))


def _split_logits(runtime, tokens: torch.Tensor) -> torch.Tensor:
    """Logits (B, T, vocab) by the training modules of a network whose head runs in vocabulary shards:
    every VNode up to the head, then x @ each shard's rows.T, in shard order."""
    graph, values, shards = runtime.graph, {"data.tokens": tokens}, []
    with torch.no_grad():
        for vid in graph.order:
            spec, module = graph.vnodes[vid], runtime.modules[vid]
            if spec.op == "lm_head_shard":
                shards.append(values[spec.inputs[0]] @ module.weight.T)
            elif not OPS[spec.op].is_loss:
                values[vid] = module(*(values[i] for i in spec.inputs))
    return torch.cat(shards, dim=-1)


@pytest.mark.parametrize("yaml, tied", [(network_yaml("llama-micro"), True), (UNTIED, False)], ids=["tied", "untied"])
def test_a_llama_shaped_network_loads_in_transformers_with_our_logits(tmp_path, yaml, tied):
    runtime, objects = checkpoint(yaml, split=True)  # as a session saves it: the vocabulary in shards when tied
    model = TrainedModel.from_checkpoint(yaml, objects)
    export_llama(model, tokenizer_json().encode(), tmp_path, EOT_TOKEN, PAD_TOKEN)
    config = json.loads((tmp_path / "config.json").read_text())
    assert (config["num_attention_heads"], config["num_key_value_heads"], config["rope_theta"]) == (4, 2, 500000.0)
    assert config["tie_word_embeddings"] is tied
    hf = transformers.AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    assert type(hf).__name__ == "LlamaForCausalLM" and hf.config.num_key_value_heads == 2
    tokens = torch.randint(0, 512, (2, 64), generator=torch.Generator().manual_seed(1))
    ours = _split_logits(runtime, tokens) if tied else _unsplit_logits(runtime, tokens)
    with torch.no_grad():
        theirs = hf(tokens).logits
    assert (theirs - ours).abs().max() <= 1e-4
    cache = KVCache(model.spec.context)
    generated = Generator(model).forward(tokens, cache)
    assert (generated - ours).abs().max() <= 1e-4
    assert {tuple(k.shape) for k, _ in cache._kv.values()} == {(2, 2, 64, 16)}  # only the 2 key/value heads are cached


def _unsplit_logits(runtime, tokens: torch.Tensor) -> torch.Tensor:
    graph, values = runtime.graph, {"data.tokens": tokens}
    with torch.no_grad():
        for vid in graph.order:
            spec, module = graph.vnodes[vid], runtime.modules[vid]
            if OPS[spec.op].is_loss:
                return values[spec.inputs[0]] @ module.weight.T
            values[vid] = module(*(values[i] for i in spec.inputs))
    raise AssertionError("no loss VNode")


@pytest.mark.parametrize("yaml", [network_yaml("llama-micro"), UNTIED], ids=["tied", "untied"])
def test_export_then_import_gives_back_every_weight_exactly(tmp_path, yaml):
    model = TrainedModel.from_checkpoint(yaml, checkpoint(yaml, split=True)[1])
    export_llama(model, tokenizer_json().encode(), tmp_path, EOT_TOKEN, PAD_TOKEN)
    back = TrainedModel.from_checkpoint(yaml, llama_objects(inference_network(yaml), tmp_path))
    for key, weight in model.weights().items():
        assert torch.equal(back.weights()[key], weight), key


def test_an_untied_network_needs_the_models_own_lm_head(tmp_path):
    tied = network_yaml("llama-micro")
    export_llama(TrainedModel.from_checkpoint(tied, checkpoint(tied, split=True)[1]), tokenizer_json().encode(),
                 tmp_path, EOT_TOKEN, PAD_TOKEN)
    with pytest.raises(WeightsMismatch, match=r"has no tensor lm_head\.weight \(the network's head\.weight\) \(its LM head "
                                              r"is tied to the embedding; the network's has its own weight\)"):
        llama_objects(inference_network(UNTIED), tmp_path)
