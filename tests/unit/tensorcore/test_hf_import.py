"""A Hugging Face Llama directory as a network's first weights: the inverse of the export, and its refusals."""

import json

import pytest
import torch

import declared

declared.module("transformers")

from safetensors.torch import load_file, save_file  # noqa: E402

from computeall.protocol.dataset_api import EOT_TOKEN, PAD_TOKEN  # noqa: E402
from computeall.tensorcore.hf_export import export_llama  # noqa: E402
from computeall.tensorcore.hf_import import WeightsMismatch, llama_objects  # noqa: E402
from computeall.tensorcore.trained_model import TrainedModel, inference_network  # noqa: E402

from .trained import checkpoint, network_yaml, tokenizer_json  # noqa: E402


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """micro-gpt with trained-looking weights, exported to a Hugging Face directory."""
    yaml = network_yaml("micro-gpt")
    model = TrainedModel.from_checkpoint(yaml, checkpoint(yaml)[1])
    out = tmp_path_factory.mktemp("hf")
    export_llama(model, tokenizer_json().encode(), out, EOT_TOKEN, PAD_TOKEN)
    return yaml, model, out


def _copy(src, dst, edit_config=None, edit_tensors=None):
    config = json.loads((src / "config.json").read_text())
    tensors = load_file(src / "model.safetensors")
    if edit_config:
        edit_config(config)
    if edit_tensors:
        edit_tensors(tensors)
    dst.mkdir()
    (dst / "config.json").write_text(json.dumps(config))
    save_file(tensors, dst / "model.safetensors")
    return dst


@pytest.mark.parametrize("name", ["micro-gpt", "tiny-gpt-heads"])
def test_export_then_import_gives_back_every_weight_exactly(tmp_path, name):
    yaml = network_yaml(name)
    model = TrainedModel.from_checkpoint(yaml, checkpoint(yaml)[1])
    export_llama(model, tokenizer_json().encode(), tmp_path, EOT_TOKEN, PAD_TOKEN)
    objects = llama_objects(inference_network(yaml), tmp_path)
    back = TrainedModel.from_checkpoint(yaml, objects)
    assert set(objects) == set(back.graph.order)  # one object per VNode, parameterless ones too
    for key, weight in model.weights().items():
        assert torch.equal(back.weights()[key], weight), key


def test_a_shape_mismatch_names_the_tensor(exported):
    yaml, _, directory = exported
    wider = inference_network(yaml.replace("hidden: 172", "hidden: 180"))
    with pytest.raises(WeightsMismatch, match=r"^model\.layers\.0\.mlp\.gate_proj\.weight has shape \[172, 64\], "
                                              r"the network's b0\.mlp\.gate_up\.weight needs \[180, 64\] there$"):
        llama_objects(wider, directory)
    deeper = inference_network(yaml.replace("count: 2", "count: 3").replace("[b1.res2]", "[b2.res2]"))
    with pytest.raises(WeightsMismatch, match=r"has no tensor model\.layers\.2\.input_layernorm\.weight \(the network's b2\.norm1\.weight\)"):
        llama_objects(deeper, directory)
    shallower = inference_network(yaml.replace("count: 2", "count: 1").replace("[b1.res2]", "[b0.res2]"))
    with pytest.raises(WeightsMismatch, match=r"has model\.layers\.1\.input_layernorm\.weight \(and 8 more\), which the network has no place for"):
        llama_objects(shallower, directory)


@pytest.mark.parametrize("edit, message", [
    (lambda c: c.update(model_type="mistral"), "describes a 'mistral' model"),
    (lambda c: c["rope_parameters"].update(rope_theta=500000.0), "rope_theta 500000.0; the network's b0.attn needs 10000.0"),
    (lambda c: c.update(rms_norm_eps=1e-6), "rms_norm_eps 1e-06; the network's norm_f needs 1e-05"),
    (lambda c: c.update(num_key_value_heads=2), "num_key_value_heads 2; the network's b0.attn needs 4"),
    (lambda c: c.update(num_attention_heads=8, num_key_value_heads=8), "num_attention_heads 8; the network's b0.attn needs 4"),
])
def test_a_setting_that_changes_the_math_is_refused(exported, tmp_path, edit, message):
    yaml, _, directory = exported
    with pytest.raises(WeightsMismatch, match=message):
        llama_objects(inference_network(yaml), _copy(directory, tmp_path / "edited", edit_config=edit))


def test_an_untied_lm_head_and_pickled_weights_are_refused(exported, tmp_path):
    yaml, _, directory = exported
    spec = inference_network(yaml)
    untied = _copy(directory, tmp_path / "untied",
                   edit_tensors=lambda t: t.update({"lm_head.weight": t["model.embed_tokens.weight"] * 2}))
    with pytest.raises(WeightsMismatch, match="lm_head.weight differs from model.embed_tokens.weight"):
        llama_objects(spec, untied)
    tied_copy = _copy(directory, tmp_path / "tied",
                      edit_tensors=lambda t: t.update({"lm_head.weight": t["model.embed_tokens.weight"].clone()}))
    assert set(llama_objects(spec, tied_copy)) == set(spec_ids(spec))  # a saved copy of the tied head is fine
    pickled = tmp_path / "pickled"
    pickled.mkdir()
    (pickled / "config.json").write_text((directory / "config.json").read_text())
    (pickled / "pytorch_model.bin").write_bytes(b"not read")
    with pytest.raises(WeightsMismatch, match=r"only safetensors are read \(pytorch_model\.bin would be unpickled\)"):
        llama_objects(spec, pickled)


def spec_ids(spec):
    return [v.id for v in spec.vnodes]
