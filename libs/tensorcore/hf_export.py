"""A trained network as a Hugging Face Llama checkpoint: config.json, model.safetensors, tokenizer files.

A network maps onto `LlamaForCausalLM` when it is, VNode for VNode, a Llama: an embedding, then
blocks of `x + attn(rmsnorm(x))`, `x + swiglu(rmsnorm(x))`, a final rmsnorm and an LM head, tied to
the embedding (`tied_lm_head_ce`) or with its own weight (`lm_head_ce`), every block alike (one
eps, one head layout with its key/value heads, one rope base, one hidden size).
`llama_layout` walks the residual stream and says which VNode breaks the pattern otherwise. What an op
is in a Llama is its registry entry's `llama` part (`computeall.network.ops`); this file maps each
part's parameters onto Llama's tensors.
Per-head networks export in their fused form (see `trained_model`).

Two conventions differ and are converted here, so the logits stay the same:
- RoPE. Ours rotates interleaved pairs (x[2i], x[2i+1]) of each head; Llama's `rotate_half`
  rotates (x[i], x[i + hd/2]), with the same frequency for pair i. Reordering each head's q and
  k rows to [even rows; odd rows] turns one into the other; q.k is unchanged because both are
  reordered alike, and v is not touched.
- Fused weights. Our qkv ((H + 2*KV)*hd, dim) is [q; k; v] and gate_up (2*hidden, dim) is [gate; up];
  Llama keeps q_proj, k_proj, v_proj, gate_proj and up_proj apart.
"""

from __future__ import annotations

import json
from dataclasses import astuple, dataclass
from pathlib import Path

import torch
from safetensors.torch import save_file

from computeall.network import Graph, NetworkSpec, VNodeSpec
from computeall.network.head_fusion import HEAD_OP
from computeall.network.ops import OPS, LlamaPart, NormParams, SwiGLUParams
from computeall.protocol.prompts import starting_documents

from .trained_model import TrainedModel

UNTIED_HEAD = "lm_head.weight"  # a model's own LM head (a tied one may be saved as a copy of the embedding)

# ops that no Llama weights can compute, and why: the export refuses them first, with the reason
_BOTTLENECK = ("a learned bottleneck replaces the residual stream by its projection through `rank` features "
               "(the network may add the tokens' embedding again after it), and a Llama layer can only add to the "
               "residual stream: a rank-limited map of it cannot be folded into any Llama weight. Sample from it with "
               "`computeall generate`; to export, train the network without bottlenecks (tiny-gpt for tiny-gpt-wan)")
NOT_IN_LLAMA = {"bottleneck_down": _BOTTLENECK, "bottleneck_up": _BOTTLENECK}


class ExportError(ValueError):
    """The network does not map onto the target format; the message names the VNode and why."""


@dataclass(frozen=True)
class Block:
    """One decoder layer's VNodes: res1 = x + attn(norm1(x)), res2 = res1 + mlp(norm2(res1))."""

    norm1: str
    attn: str
    res1: str
    norm2: str
    mlp: str
    res2: str


@dataclass(frozen=True)
class LlamaLayout:
    """Which VNode is which part of a Llama, and the hyperparameters they agree on."""

    embed: str
    blocks: list[Block]
    norm: str
    head: str
    heads: int
    kv_heads: int
    head_dim: int
    hidden: int
    eps: float
    rope_base: float
    dim: int
    tied: bool  # the LM head reads the embedding's weight


def _refuse(v: VNodeSpec, why: str) -> ExportError:
    return ExportError(f"VNode {v.id} ({v.op}) does not map onto a Llama model: {why}")


def _part(v: VNodeSpec) -> LlamaPart | None:
    return OPS[v.op].llama


def _head_layout(v: VNodeSpec) -> tuple[int, int, int, float]:
    """(query heads, key/value heads, head dim, rope base) of an attention VNode (its params say all four)."""
    p = OPS[v.op].params.model_validate(v.params)
    return p.heads, p.kv, p.head_dim, p.rope_base


def llama_layout(spec: NetworkSpec) -> LlamaLayout:
    """Follow the residual stream from the embedding to the LM head; refuse at the first VNode that is not Llama's."""
    for v in spec.vnodes:
        if v.op in NOT_IN_LLAMA:
            raise _refuse(v, NOT_IN_LLAMA[v.op])
    graph = Graph(spec)
    by_id = graph.vnodes

    def only_consumer(vid: str, parts: tuple[LlamaPart, ...], what: str, skip_adds: bool = False) -> VNodeSpec:
        """The one VNode reading `vid` (besides the residual add, with `skip_adds`); its part must be one of `parts`."""
        found = [by_id[c] for c in graph.consumers(vid) if not (skip_adds and _part(by_id[c]) == "residual")]
        heads = [c for c in found if c.op == HEAD_OP]
        if heads:
            raise _refuse(heads[0], "per-head attention exports in its fused form only, and this block's heads do not "
                                    "fuse; `computeall network show FILE --fused` says why")
        ops = "/".join(name for name, entry in OPS.items() if entry.llama in parts)
        if len(found) == 1 and _part(found[0]) not in parts:
            raise _refuse(found[0], f"Llama has {what} ({ops}) here, reading {vid}")
        if len(found) != 1:
            named = ", ".join(f"{c.id} ({c.op})" for c in found) or "nothing"
            raise _refuse(by_id[vid], f"Llama feeds it to {what} ({ops}) only; here it feeds {named}")
        return found[0]

    def residual(x: str, branch: VNodeSpec) -> VNodeSpec:
        adds = [by_id[c] for c in graph.consumers(branch.id)]
        if len(adds) != 1 or _part(adds[0]) != "residual" or sorted(adds[0].inputs) != sorted([x, branch.id]):
            raise _refuse(branch, f"Llama adds it to the residual stream {x}; here its output goes to "
                                  f"{', '.join(a.id for a in adds) or 'nothing'}")
        return adds[0]

    embeds = [v for v in spec.vnodes if v.inputs == ["data.tokens"]]
    if len(embeds) != 1 or _part(embeds[0]) != "embedding":
        raise ExportError(f"a Llama model starts from one embedding of data.tokens; this network starts with "
                          f"{', '.join(f'{v.id} ({v.op})' for v in embeds) or 'nothing'}")
    embed, x = embeds[0], embeds[0].id
    blocks: list[Block] = []
    while True:
        norm = only_consumer(x, ("norm",), "an RMSNorm", skip_adds=True)
        nxt = only_consumer(norm.id, ("attention", "head"), "attention or the LM head")
        if _part(nxt) == "head":
            head = nxt
            break
        attn = nxt
        res1 = residual(x, attn)
        norm2 = only_consumer(res1.id, ("norm",), "an RMSNorm", skip_adds=True)
        mlp = only_consumer(norm2.id, ("mlp",), "a SwiGLU MLP")
        res2 = residual(res1.id, mlp)
        blocks.append(Block(norm.id, attn.id, res1.id, norm2.id, mlp.id, res2.id))
        x = res2.id
    if head.tie not in (None, embed.id):
        raise _refuse(head, f"a Llama's LM head is tied to its embedding {embed.id} or has its own weight; "
                            f"this one ties {head.tie}")
    if not blocks:
        raise ExportError("the network has no transformer block to export")

    layouts = {b.attn: _head_layout(by_id[b.attn]) for b in blocks}
    hiddens = {b.mlp: SwiGLUParams.model_validate(by_id[b.mlp].params).hidden for b in blocks}
    norm_ids = [n for b in blocks for n in (b.norm1, b.norm2)] + [norm.id]
    epss = {n: NormParams.model_validate(by_id[n].params).eps for n in norm_ids}
    for what, values in (("head layout (heads, kv_heads, head_dim, rope_base)", layouts), ("hidden size", hiddens), ("eps", epss)):
        first = next(iter(values.values()))
        for vid, value in values.items():
            if value != first:
                raise _refuse(by_id[vid], f"its {what} {value} differs from the first block's {first}; Llama has one for all")
    used = {embed.id, norm.id, head.id} | {vid for b in blocks for vid in astuple(b)}
    extra = [v for v in spec.vnodes if v.id not in used]
    if extra:
        raise _refuse(extra[0], "it is outside the Llama pattern (embedding, blocks, final norm, LM head)")
    heads, kv_heads, head_dim, rope_base = next(iter(layouts.values()))
    return LlamaLayout(
        embed=embed.id, blocks=blocks, norm=norm.id, head=head.id, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
        hidden=next(iter(hiddens.values())), eps=next(iter(epss.values())), rope_base=rope_base,
        dim=embed.params["dim"], tied=head.tie is not None,
    )


def _rope_to_half(w: torch.Tensor, heads: int, head_dim: int) -> torch.Tensor:
    """q or k rows (H*hd, dim) from interleaved-pair order to half-rotation order, head by head."""
    return w.view(heads, head_dim // 2, 2, -1).transpose(1, 2).reshape(heads * head_dim, -1)


def _rope_from_half(w: torch.Tensor, heads: int, head_dim: int) -> torch.Tensor:
    """The inverse of `_rope_to_half`."""
    return w.view(heads, 2, head_dim // 2, -1).transpose(1, 2).reshape(heads * head_dim, -1)


@dataclass(frozen=True)
class Piece:
    """A Hugging Face tensor that is one block of rows of one of our weights."""

    name: str
    rows: int | None = None  # how many of our weight's rows it takes; None: all of them
    rope_heads: int = 0  # q or k rows of this many heads: RoPE pairs reordered on the way (module docstring)


def llama_pieces(layout: LlamaLayout) -> dict[str, list[Piece]]:
    """Each of our weights (`<vnode>.<param>`) and the Llama tensors it is made of, as blocks of rows in
    order: qkv is [q; k; v], gate_up is [gate; up]. A tied LM head has no weight of its own."""
    out = {f"{layout.embed}.weight": [Piece("model.embed_tokens.weight")], f"{layout.norm}.weight": [Piece("model.norm.weight")]}
    if not layout.tied:
        out[f"{layout.head}.weight"] = [Piece(UNTIED_HEAD)]
    hd, kv = layout.head_dim, layout.kv_heads
    for i, b in enumerate(layout.blocks):
        layer = f"model.layers.{i}"
        out.update({
            f"{b.norm1}.weight": [Piece(f"{layer}.input_layernorm.weight")],
            f"{b.attn}.qkv.weight": [Piece(f"{layer}.self_attn.q_proj.weight", layout.heads * hd, rope_heads=layout.heads),
                                     Piece(f"{layer}.self_attn.k_proj.weight", kv * hd, rope_heads=kv),
                                     Piece(f"{layer}.self_attn.v_proj.weight", kv * hd)],
            f"{b.attn}.proj.weight": [Piece(f"{layer}.self_attn.o_proj.weight")],
            f"{b.norm2}.weight": [Piece(f"{layer}.post_attention_layernorm.weight")],
            f"{b.mlp}.gate_up.weight": [Piece(f"{layer}.mlp.gate_proj.weight", layout.hidden),
                                        Piece(f"{layer}.mlp.up_proj.weight", layout.hidden)],
            f"{b.mlp}.down.weight": [Piece(f"{layer}.mlp.down_proj.weight")],
        })
    return out


def split_rows(pieces: list[Piece], weight: torch.Tensor) -> list[torch.Tensor]:
    """Our weight as the blocks of rows its pieces take, in order."""
    return list(weight.split([p.rows or weight.shape[0] for p in pieces], dim=0))


def to_llama(piece: Piece, rows: torch.Tensor, layout: LlamaLayout) -> torch.Tensor:
    """Our block of rows as the Llama tensor `piece`."""
    return _rope_to_half(rows, piece.rope_heads, layout.head_dim) if piece.rope_heads else rows


def from_llama(piece: Piece, tensor: torch.Tensor, layout: LlamaLayout) -> torch.Tensor:
    """The Llama tensor `piece` as our block of rows."""
    return _rope_from_half(tensor, piece.rope_heads, layout.head_dim) if piece.rope_heads else tensor


def llama_state(model: TrainedModel, layout: LlamaLayout) -> dict[str, torch.Tensor]:
    """The `LlamaForCausalLM` state dict (a tied LM head is the embedding, so not stored)."""
    weights = model.weights()
    out = {}
    for ours, pieces in llama_pieces(layout).items():
        for piece, rows in zip(pieces, split_rows(pieces, weights[ours])):
            out[piece.name] = to_llama(piece, rows, layout)
    return {k: t.detach().contiguous().clone() for k, t in out.items()}


def llama_config(spec: NetworkSpec, layout: LlamaLayout, eos_token_id: int, pad_token_id: int | None) -> dict:
    """config.json of a `LlamaConfig` with the network's sizes, norm eps and rope base."""
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": spec.vocab_size,
        "hidden_size": layout.dim,
        "intermediate_size": layout.hidden,
        "num_hidden_layers": len(layout.blocks),
        "num_attention_heads": layout.heads,
        "num_key_value_heads": layout.kv_heads,
        "head_dim": layout.head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": spec.context,
        "rms_norm_eps": layout.eps,
        "rope_theta": layout.rope_base,  # what transformers before v5 read
        "rope_parameters": {"rope_type": "default", "rope_theta": layout.rope_base},
        "attention_bias": False,
        "mlp_bias": False,
        "tie_word_embeddings": layout.tied,
        "bos_token_id": eos_token_id,  # documents start after <|endoftext|> in training
        "eos_token_id": eos_token_id,
        "pad_token_id": pad_token_id,
        "dtype": "float32",
    }


def tokenizer_config(spec: NetworkSpec, eos_token: str, pad_token: str | None) -> dict:
    """tokenizer_config.json for a `PreTrainedTokenizerFast` over our tokenizer.json."""
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": eos_token,
        "eos_token": eos_token,
        "pad_token": pad_token,
        "model_max_length": spec.context,
        "clean_up_tokenization_spaces": False,
        "add_bos_token": True,
    }


def export_llama(model: TrainedModel, tokenizer_json: bytes, out: Path, eos_token: str, pad_token: str | None) -> list[Path]:
    """Write the Hugging Face directory `out`; the files written. `tokenizer_json` is the dataset's tokenizer file."""
    layout = llama_layout(model.spec)
    vocab = json.loads(tokenizer_json).get("added_tokens", [])
    ids = {t["content"]: t["id"] for t in vocab}
    if eos_token not in ids:
        raise ExportError(f"the tokenizer has no {eos_token} token to end documents with")
    out.mkdir(parents=True, exist_ok=True)
    files = {
        "config.json": json.dumps(llama_config(model.spec, layout, ids[eos_token], ids.get(pad_token)), indent=2),
        "tokenizer_config.json": json.dumps(tokenizer_config(model.spec, eos_token, pad_token if pad_token in ids else None), indent=2),
        "generation_config.json": json.dumps({"bos_token_id": ids[eos_token], "eos_token_id": ids[eos_token],
                                              "pad_token_id": ids.get(pad_token)}, indent=2),
    }
    for name, text in files.items():
        (out / name).write_text(text + "\n")
    (out / "tokenizer.json").write_bytes(starting_documents(tokenizer_json, eos_token, ids[eos_token]))
    save_file(llama_state(model, layout), str(out / "model.safetensors"), metadata={"format": "pt"})
    return [out / name for name in (*files, "tokenizer.json", "model.safetensors")]
