"""Per-head GPT networks as YAML: every attention head its own VNode, one concat per block.

The shape of `examples/networks/tiny-gpt-heads.yaml` at any size, for tests and benchmarks
of attention-head fusion.
"""

from __future__ import annotations


def per_head_gpt(
    heads: int = 4,
    blocks: int = 2,
    dim: int = 64,
    context: int = 32,
    vocab: int = 128,
    block_heads: str | None = None,
    name: str = "heads-test",
    hidden: int | None = None,
) -> str:
    """A pre-norm GPT whose attention is `heads` attention_head VNodes + one concat_heads per block.

    `block_heads` replaces the repeated head/concat lines (for the negative cases).
    """
    head_dim = dim // heads
    ids = ", ".join('"b{i}.h%d"' % h for h in range(heads))
    lines = block_heads or "\n".join(
        ['        - {id: "b{i}.h%d", op: attention_head, head: %d, inputs: ["b{i}.norm1"]}' % (h, h) for h in range(heads)]
        + ['        - {id: "b{i}.attn", op: concat_heads, inputs: [%s]}' % ids]
    )
    return f"""name: {name}
vocab_size: {vocab}
context: {context}
defaults: {{dim: {dim}, heads: {heads}, head_dim: {head_dim}, hidden: {hidden or dim * 2}}}
vnodes:
  - {{id: embed, op: embedding, inputs: [data.tokens]}}
  - repeat:
      count: {blocks}
      input: embed
      output: "b{{i}}.res2"
      vnodes:
        - {{id: "b{{i}}.norm1", op: rmsnorm, inputs: ["{{in}}"]}}
{lines}
        - {{id: "b{{i}}.res1", op: add, inputs: ["{{in}}", "b{{i}}.attn"]}}
        - {{id: "b{{i}}.norm2", op: rmsnorm, inputs: ["b{{i}}.res1"]}}
        - {{id: "b{{i}}.mlp", op: swiglu_mlp, inputs: ["b{{i}}.norm2"]}}
        - {{id: "b{{i}}.res2", op: add, inputs: ["b{{i}}.res1", "b{{i}}.mlp"]}}
  - {{id: norm_f, op: rmsnorm, inputs: [b{blocks - 1}.res2]}}
  - {{id: head, op: tied_lm_head_ce, inputs: [norm_f, data.targets], tie: embed}}
"""
