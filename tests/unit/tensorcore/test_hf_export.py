"""Export to Hugging Face: transformers loads the directory and computes our logits; other networks are refused."""

import json

import pytest
import torch

import declared

transformers = declared.module("transformers")

from computeall.protocol.dataset_api import EOT_TOKEN, PAD_TOKEN  # noqa: E402
from computeall.protocol.prompts import PromptCodec, starting_documents, without_document_start  # noqa: E402
from computeall.tensorcore.generation import Generator, KVCache  # noqa: E402
from computeall.tensorcore.hf_export import ExportError, export_llama, llama_layout  # noqa: E402
from computeall.tensorcore.trained_model import TrainedModel, inference_network  # noqa: E402

from .trained import checkpoint, network_yaml, reference_logits, tokenizer_json  # noqa: E402


def _export(yaml: str, objects: dict[str, bytes], out):
    model = TrainedModel.from_checkpoint(yaml, objects)
    export_llama(model, tokenizer_json().encode(), out, EOT_TOKEN, PAD_TOKEN)
    return model, transformers.AutoModelForCausalLM.from_pretrained(out).eval()


def _tokens(vocab: int, n: int = 96) -> torch.Tensor:
    return torch.randint(0, vocab, (2, n), generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("name, fused", [("tiny-gpt", False), ("tiny-gpt-heads", False), ("tiny-gpt-heads", True)])
def test_transformers_computes_our_logits(tmp_path, name, fused):
    yaml = network_yaml(name)
    runtime, objects = checkpoint(yaml, fused=fused)  # per-head: the checkpoint of either topology
    model, hf = _export(yaml, objects, tmp_path)
    assert type(hf).__name__ == "LlamaForCausalLM"
    tokens = _tokens(model.spec.vocab_size)
    with torch.no_grad():
        theirs = hf(tokens).logits
    ours = reference_logits(runtime, tokens)
    assert (theirs - ours).abs().max() <= 1e-4
    assert (Generator(model).forward(tokens, KVCache(model.spec.context)) - ours).abs().max() <= 1e-4


def test_the_tokenizer_loads_as_a_fast_tokenizer_with_our_ids(tmp_path):
    from tokenizers import Tokenizer

    yaml = network_yaml("micro-gpt")
    _export(yaml, checkpoint(yaml)[1], tmp_path)
    hf = transformers.AutoTokenizer.from_pretrained(tmp_path)
    ours = Tokenizer.from_str(tokenizer_json())
    text = "def generate(tokens):\n    return the model"
    assert isinstance(hf, transformers.PreTrainedTokenizerFast)
    # a prompt starts a document, in transformers as in `computeall generate`
    assert hf(text)["input_ids"] == PromptCodec(ours).prompt(text)
    assert hf(text)["input_ids"] == [ours.token_to_id(EOT_TOKEN), *ours.encode(text, add_special_tokens=False).ids]
    assert hf(text, add_special_tokens=False)["input_ids"] == ours.encode(text, add_special_tokens=False).ids
    assert hf.eos_token == EOT_TOKEN and hf.eos_token_id == ours.token_to_id(EOT_TOKEN)
    assert hf.decode(hf(text)["input_ids"], skip_special_tokens=True) == text


def _variant(old: str, new: str, name: str = "micro-gpt") -> str:
    yaml = network_yaml(name)
    assert old in yaml
    return yaml.replace(old, new)


@pytest.mark.parametrize("yaml, vnode, why", [
    (_variant('op: rmsnorm, inputs: ["{in}"]', 'op: layernorm, inputs: ["{in}"]'), "b0.norm1", "layernorm"),
    (_variant('- {id: "b{i}.res1", op: add, inputs: ["{in}", "b{i}.attn"]}',
              '- {id: "b{i}.res1", op: add, inputs: ["b{i}.norm1", "b{i}.attn"]}'), "b0.norm1", "b0.res1 (add)"),
    (_variant("- {id: norm_f, op: rmsnorm, inputs: [b1.res2]}",
              "- {id: norm_f, op: rmsnorm, inputs: [b1.res2], eps: 1.0e-6}"), "norm_f", "eps"),
    (_variant('- {id: "b{i}.h7", op: attention_head, head: 7, inputs: ["b{i}.norm1"]}',
              '- {id: "b{i}.h7", op: attention_head, head: 7, inputs: ["b{i}.norm1"], rope_base: 500.0}', "tiny-gpt-heads"),
     "b0.h0", "do not fuse"),
])
def test_a_network_that_is_no_llama_is_refused_naming_the_vnode(yaml, vnode, why):
    with pytest.raises(ExportError, match=rf"^VNode {vnode} \(.*\) does not map onto a Llama model") as refused:
        llama_layout(inference_network(yaml))
    assert why in str(refused.value)


def test_the_exported_tokenizer_gives_back_the_datasets_bytes():
    """`--init-from DIR` checks an exported tokenizer against its dataset's by digest: the document start
    added for transformers comes off again, byte for byte."""
    for ours in (tokenizer_json().encode(), json.dumps(json.loads(tokenizer_json()), indent=2).encode()):  # as saved
        exported = starting_documents(ours, EOT_TOKEN, 0)
        assert exported != ours and without_document_start(exported) == ours
        assert without_document_start(ours) == ours
