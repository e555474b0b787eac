"""What one op entry declares: everything validation, the graph and the allocator know about it.

An entry names its torch module by a dotted path ("package.module:Class") instead of importing
it, so this package (and the orchestrator that reads it) never imports torch; the PNode side
resolves the path (`computeall.tensorcore.ops.module_class`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict

from computeall.protocol.config import DecayGroup

# Inputs that come from the dataset rather than from a VNode: token ids (B, T).
DATA_INPUTS = ("data.tokens", "data.targets")

# How sampling (`computeall.tensorcore.generation`) runs an op, a few new positions at a time after
# the cached ones: "position_wise", its training module as it is (it mixes no positions); "kv_cache",
# its module's `forward_cached(*inputs, cache, vnode)`, which attends over the KV cache (it mixes
# positions); "logits", a loss whose module's `logits(x)` stands for it.
Generation = Literal["position_wise", "kv_cache", "logits"]
# What a VNode of the op is in a Hugging Face Llama (`computeall.tensorcore.hf_export` maps each part's
# parameters onto Llama's tensors): the token embedding, an RMSNorm, self-attention, the SwiGLU MLP,
# a residual add, the LM head.
LlamaPart = Literal["embedding", "norm", "attention", "mlp", "residual", "head"]


class OpParams(BaseModel):
    """The base of every op's YAML parameters: unknown fields are errors, not silently ignored."""

    model_config = ConfigDict(extra="forbid")


class Problem(NamedTuple):
    """One thing wrong with a VNode, as a shape check reports it; the loader adds the VNode's id."""

    field: str
    message: str


class Site(NamedTuple):
    """Where a VNode sits, as the cost models see it: the sequence length and its output width
    (the width of its inputs for an elementwise op; 1 where there is none)."""

    context: int
    features: int


@dataclass(frozen=True)
class TiedWeight:
    """The op reads its weight from the VNode named in `tie`, which must be an `op` whose
    `same` parameters equal this VNode's."""

    op: str
    same: tuple[str, ...]


Params = Any  # the entry's own `params` model; each op's functions take that concrete type
ShapeCheck = Callable[[Params, list[str]], list[Problem]]
# (params, site, tokens of a micro-batch, bytes of an element of its precision) -> bytes
WorkingBytes = Callable[[Params, Site, int, int], int]


def per_token_working(widths: float) -> WorkingBytes:
    """Working memory of an op whose temporaries are `widths` of its width per token, in its precision."""
    return lambda p, site, tokens, element: int(widths * site.features * tokens * element)


@dataclass(frozen=True)
class OpSpec:
    name: str
    params: type[OpParams]
    n_inputs: int | Callable[[Params], int]  # a count, or one that depends on the parameters
    out_features: Callable[[Params], int] | None  # None: elementwise, the same as its inputs, which must agree
    # the width each VNode input must have (one for all, or one per input) and the field that sets it;
    # None only for elementwise ops
    in_features: Callable[[Params], int | list[int]] | None
    param_count: Callable[[Params], int]
    check: ShapeCheck  # (params, inputs) -> problems, beyond what the params model checks
    flops_per_token: Callable[[Params, Site], float]  # forward + backward
    activation_elements: Callable[[Params, Site], int]  # per token of a micro-batch, kept for backward
    module: str  # "computeall.tensorcore.ops.<file>:<Class>", constructed with the params' fields
    example: dict[str, Any]  # small valid parameters, so the tests can exercise every entry
    in_field: str = "dim"
    is_loss: bool = False
    tie: TiedWeight | None = None
    # what its parameters are to weight decay: a layer's ("weights": its vectors are biases), a norm's,
    # or an embedding's (OptimizerConfig.no_decay names the groups that do not decay)
    param_group: Literal["weights", "norm", "embedding"] = "weights"
    # False for an op whose backward reads no input values (a sum): when it recomputes, it keeps
    # nothing of its inputs and runs again on stand-ins of their shape
    backward_reads_inputs: bool = True
    # True for an op whose output is fp32 whatever its precision (softmax statistics): the gradients
    # handed back to it are summed in fp32 too
    fp32_output: bool = False
    # what its forward or backward holds for a moment above what it keeps and the gradients it hands
    # on (temporaries, a weight gradient made in two steps): a stage's peak has its largest VNode's
    # (`computeall.network.memory_model`); measured per op with torch's profiler, its allocations replayed
    working_bytes: WorkingBytes = per_token_working(12)
    # elements per token it keeps in fp32 besides `activation_elements`, whatever its precision (a norm
    # normalises in fp32); (params, site, below fp32) -> elements, below fp32 its input's fp32 copy too
    fp32_activation_elements: Callable[[Params, Site, bool], int] = lambda p, site, upcast: 0
    # how sampling runs it (`Generation`); None: sampling refuses a network with it.
    # tests/unit/tensorcore/test_op_generation.py runs every op both ways and compares
    generation: Generation | None = "position_wise"
    # its part in a Hugging Face Llama (`LlamaPart`); None: no Llama has it, so a network with it does not export
    llama: LlamaPart | None = None

    def decay_group(self, ndim: int) -> DecayGroup:
        """The weight-decay group of one of this op's parameters, from its number of dimensions."""
        if self.param_group == "weights" and ndim < 2:
            return "bias"
        return self.param_group

    def expected_in_features(self, params: Params, count: int) -> list[int]:
        """The width each of `count` VNode inputs must have."""
        assert self.in_features is not None, f"op {self.name} is elementwise"
        want = self.in_features(params)
        return list(want) if isinstance(want, list) else [want] * count


def _dim(params: Params) -> int:
    return params.dim


def reads_dim(**fields: Any) -> OpSpec:
    """An op that reads one input of width `dim` (a data input, such as the tokens, has no width to check)."""
    return OpSpec(n_inputs=1, in_features=_dim, **fields)


def width_preserving(**fields: Any) -> OpSpec:
    """An op that reads one input of width `dim` and writes the same width (attention, MLPs, norms, embeddings)."""
    return reads_dim(out_features=_dim, **fields)


def loss_head(**fields: Any) -> OpSpec:
    """A loss over the logits x @ W.T of an LM head: it reads x (width `dim`) and then the targets,
    writes the loss, and sampling stands its logits for it (`targets_second` is its shape check)."""
    return OpSpec(n_inputs=2, in_features=_dim, out_features=lambda p: 1, is_loss=True, generation="logits",
                  llama="head", **fields)


def targets_second(op: str) -> ShapeCheck:
    """The shape check of a loss head: its second input is the targets."""
    def check(params: Params, inputs: list[str]) -> list[Problem]:
        if inputs[1:] != ["data.targets"]:
            return [Problem("inputs", f"the second input of {op} is data.targets")]
        return []

    return check


def n_inputs(op: OpSpec, params: Params) -> int:
    """How many inputs a VNode of `op` with these parameters reads."""
    return op.n_inputs(params) if callable(op.n_inputs) else op.n_inputs


def no_shape_rules(params: Params, inputs: list[str]) -> list[Problem]:
    """The shape check of an op whose params model already says everything."""
    return []


def weights_flops(param_count: Callable[[Params], int]) -> Callable[[Params, Site], float]:
    """The FLOPs model of an op that is matmuls over its weights: 6 per weight element per token
    (2 forward, 4 backward)."""
    return lambda p, site: 6.0 * param_count(p)


def attention_flops(param_count: Callable[[Params], int],
                    attended: Callable[[Params], int]) -> Callable[[Params, Site], float]:
    """The FLOPs model of attention: its weights' (`weights_flops`), plus q.k and p.v over the context
    for each of the `attended` query features (its heads' widths): causal halves it, backward doubles it."""
    weights = weights_flops(param_count)
    return lambda p, site: weights(p, site) + 6.0 * site.context * attended(p)


def catalogue(*ops: OpSpec) -> dict[str, OpSpec]:
    """The registry: op name -> entry; two entries with one name are a programming error."""
    out: dict[str, OpSpec] = {}
    for op in ops:
        if op.name in out:
            raise ValueError(f"op {op.name!r} is registered twice")
        out[op.name] = op
    return out
