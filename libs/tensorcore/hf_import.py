"""A local Hugging Face Llama directory as the first weights of a session's network.

The inverse of `hf_export`, through the same table (`llama_pieces`): the network must be a Llama
(`llama_layout`), the directory's config must compute what the network computes (rope theta, norm
eps, the key/value heads, SiLU, the LM head tied or not), and every tensor must be there with
the shape the network needs; a mismatch names the tensor (or the setting). Only safetensors files
are read (a `.bin` is a pickle), and nothing is downloaded. The result is one object per VNode of
the network's fused form, weights only, which the PNodes load like a checkpoint.
"""

from __future__ import annotations

import json
from contextlib import ExitStack
from pathlib import Path

import torch
from safetensors import safe_open

from computeall.network import NetworkSpec

from .checkpoint import weights_object
from .hf_export import UNTIED_HEAD, ExportError, LlamaLayout, from_llama, llama_layout, llama_pieces
from .trained_model import TrainedModel

SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
IGNORED = ("rotary_emb.inv_freq",)  # buffers some exports carry; they are recomputed, never trained


class WeightsMismatch(ValueError):
    """The directory cannot be this network's weights; the message names the tensor or setting and why."""


def llama_objects(spec: NetworkSpec, directory: Path) -> dict[str, bytes]:
    """VNode id -> its weights object, for `spec` in its fused fp32 form (`trained_model.inference_network`)."""
    try:
        layout = llama_layout(spec)
    except ExportError as exc:
        raise WeightsMismatch(f"network {spec.name} is not a Llama, so no Llama directory fits it: {exc}") from None
    config = read_config(directory)
    model = TrainedModel.untrained(spec)
    wanted = {key: tuple(p.shape) for key, p in model.weights().items()}
    with ExitStack() as stack:
        where = _tensor_files(directory)
        opened = {path: stack.enter_context(safe_open(path, framework="pt")) for path in set(where.values())}
        files = {name: opened[path] for name, path in where.items()}
        weights = {}
        for ours, pieces in llama_pieces(layout).items():
            rows, *rest = wanted[ours]
            blocks = []
            for piece in pieces:
                shape = (piece.rows or rows, *rest)
                if piece.name not in files:
                    tied = " (its LM head is tied to the embedding; the network's has its own weight)" \
                        if piece.name == UNTIED_HEAD and config.get("tie_word_embeddings") else ""
                    raise WeightsMismatch(f"{directory} has no tensor {piece.name} (the network's {ours}){tied}")
                found = tuple(files[piece.name].get_slice(piece.name).get_shape())
                if found != shape:
                    raise WeightsMismatch(
                        f"{piece.name} has shape {list(found)}, the network's {ours} needs {list(shape)} there"
                    )
                blocks.append(from_llama(piece, files[piece.name].get_tensor(piece.name).float(), layout))
            weights[ours] = torch.cat(blocks)
        _check_leftovers(files, llama_pieces(layout), weights[f"{layout.embed}.weight"], directory)
    check_config(config, layout)  # after the shapes: those name the tensor, these the setting
    model.load(weights)
    return {vid: weights_object(vid, module) for vid, module in model.modules.items()}


def read_config(directory: Path) -> dict:
    """config.json, which must describe a Llama."""
    path = directory / "config.json"
    try:
        config = json.loads(path.read_text())
    except FileNotFoundError:
        raise WeightsMismatch(f"{directory} has no config.json: it is not a Hugging Face model directory") from None
    except ValueError as exc:
        raise WeightsMismatch(f"{path} is not JSON: {exc}") from None
    kind = config.get("model_type")
    if kind != "llama":
        raise WeightsMismatch(f"config.json describes a {kind!r} model; only Llama maps onto a computeall network")
    return config


def check_config(config: dict, layout: LlamaLayout) -> None:
    """The settings that change the math without changing a shape must be the network's."""
    rope = config.get("rope_parameters") or config.get("rope_scaling") or {}
    theta = rope.get("rope_theta", config.get("rope_theta", 10000.0))
    rope_type = rope.get("rope_type", rope.get("type", "default"))
    heads = config.get("num_attention_heads")
    attn = by_block(layout, "attn")
    checks = [
        ("num_attention_heads", heads, layout.heads, attn),
        ("num_key_value_heads", config.get("num_key_value_heads", heads), layout.kv_heads, attn),
        ("rope type", rope_type, "default", attn),
        ("rope_theta", float(theta), float(layout.rope_base), attn),
        ("rms_norm_eps", float(config.get("rms_norm_eps", 1e-6)), float(layout.eps), layout.norm),
        ("hidden_act", config.get("hidden_act", "silu"), "silu", by_block(layout, "mlp")),
    ]
    for field, theirs, ours, vnode in checks:
        if theirs != ours:
            raise WeightsMismatch(f"config.json has {field} {theirs!r}; the network's {vnode} needs {ours!r}")


def by_block(layout: LlamaLayout, part: str) -> str:
    return getattr(layout.blocks[0], part)


def _tensor_files(directory: Path) -> dict[str, Path]:
    """Tensor name -> the safetensors file that holds it."""
    if (directory / INDEX_FILE).exists():
        try:
            weight_map = json.loads((directory / INDEX_FILE).read_text())["weight_map"]
        except (ValueError, KeyError) as exc:
            raise WeightsMismatch(f"{directory / INDEX_FILE} has no readable weight_map: {exc}") from None
        return {name: directory / file for name, file in weight_map.items()}
    if (directory / SINGLE_FILE).exists():
        with safe_open(directory / SINGLE_FILE, framework="pt") as f:
            return {name: directory / SINGLE_FILE for name in f.keys()}
    pickled = sorted(p.name for p in directory.glob("*.bin"))
    why = (f"only safetensors are read ({', '.join(pickled)} would be unpickled); save the model with "
           f"`save_pretrained(DIR, safe_serialization=True)`") if pickled else "there are no weights"
    raise WeightsMismatch(f"{directory} has no {SINGLE_FILE}: {why}")


def _check_leftovers(files: dict, pieces: dict, embedding: torch.Tensor, directory: Path) -> None:
    """Refuse tensors the network has no place for, but a saved copy of the tied LM head."""
    used = {p.name for blocks in pieces.values() for p in blocks}
    extra = [n for n in files if n not in used and not n.endswith(IGNORED)]
    if UNTIED_HEAD in extra:
        head = files[UNTIED_HEAD].get_tensor(UNTIED_HEAD).float()
        if head.shape != embedding.shape or not torch.equal(head, embedding):
            raise WeightsMismatch("lm_head.weight differs from model.embed_tokens.weight; the network's LM head is "
                                  "tied to its embedding, so a model with its own LM head does not fit")
        extra.remove(UNTIED_HEAD)
    if extra:
        more = f" (and {len(extra) - 1} more)" if len(extra) > 1 else ""
        raise WeightsMismatch(f"{directory} has {sorted(extra)[0]}{more}, which the network has no place for")
