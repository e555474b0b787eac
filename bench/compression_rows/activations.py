"""bench/compression.py's `activations` and `activation_grads` rows: what crosses a pipeline cut, and
what it costs in loss.

Each method is a network (METHODS): tiny-gpt as it is (fp32, the anchor), tiny-gpt with the int8 wire,
and tiny-gpt-wan (a learned bottleneck where two PNodes cut it, int8 on its narrow edge) at rank 8 and
16, and at full width (rank 256, fp32: the same network uncompressed). Each trains the same steps on
the same tokens with the same seed, in one process through the code a PNode runs (`local_step`: VNode
by VNode, every edge through its wire format, so 1 PNode and K give these bits) with a session's
defaults (AdamW, warmup and cosine, global gradient clipping at 1.0), then measures its loss on
held-out tokens. Losses are compared with tiny-gpt's (`val_loss_ratio_vs_uncompressed`: the target,
within 2% after 300 steps) and with the same network's uncompressed form
(`val_loss_ratio_vs_same_network_uncompressed`).

Bytes are counted where two PNodes cut the network (`cut`): the frames a PNode sends for one
micro-batch's activation there and for the gradients of it that come back, one per reader
(`tensorcore.tensor_frames`: header, values, int8 scales), against the frames of one fp32 residual-stream tensor
at the same place of tiny-gpt (target: at most 1/32). (tiny-gpt's own cut reads 0.5 for its gradients:
a block boundary has two readers, the norm and the residual add, and each sends its gradient back.)
The tokens a PNode after a bottleneck reads from the dataset service (2 bytes a token) are not a
pipeline edge.

Tokens: Tiny Shakespeare (`../shared/data/tinyshakespeare.txt`) through a 4096-token byte-level BPE
trained on it as the dataset service trains one; its last tenth is the validation split. `--quick`:
80 steps, the anchor against rank 16 only, bytes bounded and losses reported; the full run trains
every method for 300 steps (an hour or more on two busy cores).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from computeall.dataset.tokenizer import eot_id, train as train_tokenizer
from computeall.network import Graph, NetworkSpec, load_network
from computeall.protocol.config import LrSchedule, OptimizerConfig
from computeall.tensorcore.local_step import local_step, local_validation
from computeall.tensorcore.optimizer import VNodeOptimizer
from computeall.tensorcore.vnode_runtime import VNodeRuntime
from computeall.tensorcore.tensor_frames import encoded_frames
from computeall.tensorcore.wire_formats import wire_format

from ..common import Bench, at_most

REPO = Path(__file__).resolve().parents[2]
NETWORKS = REPO / "examples" / "networks"
SHAKESPEARE = next((p / "shared" / "data" / "tinyshakespeare.txt" for p in REPO.parents
                    if (p / "shared" / "data" / "tinyshakespeare.txt").exists()), None)
CHUNK_BYTES = 1 << 20  # a PNode's frames stay below the server's max_payload
BYTES_TARGET = 1 / 32  # the floor: pipeline edges at least 32x smaller than fp32
LOSS_TARGET = 1.02  # within 2% of the uncompressed network's validation loss
GRAD_CLIP = 1.0  # a session's default
BATCH, MICRO_BATCHES = 8, 4


@dataclass(frozen=True)
class Method:
    name: str
    network: str  # a file of examples/networks
    cut: str  # the VNode whose output crosses the cut of a 2-PNode pipeline
    wire: str | None = None  # the session's `wire`, when it sets one
    rank: int | None = None  # the bottleneck's width, when it is not the file's
    cut_wire: str | None = None  # the cut VNode's own wire, when it is not the file's


ANCHOR = Method("fp32", "tiny-gpt.yaml", "b1.res2")
METHODS = [
    ANCHOR,
    Method("int8 wire", "tiny-gpt.yaml", "b1.res2", wire="int8"),
    Method("bottleneck r=8 + int8", "tiny-gpt-wan.yaml", "cut.down", rank=8),
    Method("bottleneck r=16 + int8", "tiny-gpt-wan.yaml", "cut.down", rank=16),
    # tiny-gpt-wan's structure with nothing narrowed: "the same network uncompressed"
    Method("tiny-gpt-wan at full width", "tiny-gpt-wan.yaml", "cut.down", rank=256, cut_wire="fp32"),
]
SAME_UNCOMPRESSED = {m.network: m for m in (ANCHOR, METHODS[-1])}  # each network's uncompressed form
QUICK = [ANCHOR, METHODS[3]]


def network(method: Method) -> NetworkSpec:
    spec = load_network((NETWORKS / method.network).read_text())
    if method.wire:
        spec.wire = method.wire
    for v in spec.vnodes:
        if method.rank and "rank" in v.params:
            v.params["rank"] = method.rank
        if method.cut_wire and v.id == method.cut:
            v.wire = method.cut_wire
    return spec


def token_ids() -> tuple[torch.Tensor, int]:
    """The corpus as BPE ids (and the tokenizer's vocabulary size)."""
    if SHAKESPEARE is not None:
        text = SHAKESPEARE.read_text()
    else:
        from computeall.cli.default_corpus import stdlib_files

        text = "".join(Path(f).read_text(errors="replace") for f in stdlib_files(1 << 20))
    documents = text.split("\n\n")
    tokenizer = train_tokenizer(documents, 4096, len(documents))
    eot = eot_id(tokenizer)
    ids = [i for e in tokenizer.encode_batch(documents, add_special_tokens=False) for i in [*e.ids, eot]]
    return torch.tensor(ids), tokenizer.get_vocab_size()


def windows(ids: torch.Tensor, count: int, context: int, seed: int) -> torch.Tensor:
    """`count` windows of context + 1 tokens at seeded random places: (count, context + 1)."""
    starts = torch.randint(0, ids.numel() - context - 1, (count,), generator=torch.Generator().manual_seed(seed))
    return torch.stack([ids[s : s + context + 1] for s in starts.tolist()])


class CutBytes:
    """A runtime observer that frames what crosses the cut, as a PNode sends it: the cut VNode's
    activation, and the gradient of it from each of its readers (each comes back on its own)."""

    def __init__(self, graph: Graph, cut: str) -> None:
        self.cut, self.wire = cut, wire_format(graph.wire(cut))
        self.reads = {c: graph.vnodes[c].inputs.index(cut) for c in graph.consumers(cut)}
        self.activation = self.gradient = 0

    def _framed(self, t: torch.Tensor) -> int:
        return sum(len(f) for f in encoded_frames("cut", self.wire.encode(t), CHUNK_BYTES))

    def forward_done(self, vid, micro, inputs, output):
        if vid == self.cut:
            self.activation, self.gradient = self._framed(output), 0
        return output

    def backward_done(self, vid, micro, input_grads, param_grads):
        if vid in self.reads:
            self.gradient += self._framed(input_grads[self.reads[vid]])
        return input_grads


def fp32_frame_bytes(shape: tuple[int, ...]) -> int:
    return sum(len(f) for f in encoded_frames("cut", wire_format("fp32").encode(torch.zeros(shape)), CHUNK_BYTES))


def train(method: Method, train_batches: list[list[torch.Tensor]], val: list[torch.Tensor]) -> dict:
    graph = Graph(network(method))
    runtime = VNodeRuntime(graph, graph.order, 0, torch.device("cpu"))
    cut = runtime.observer = CutBytes(graph, method.cut)
    optimizer = VNodeOptimizer(runtime.parameters(), OptimizerConfig(), runtime.decay_groups())
    schedule, losses, t0 = LrSchedule(), [], time.perf_counter()
    for step, micro_batches in enumerate(train_batches):
        losses.append(local_step(runtime, micro_batches).loss)
        norms = runtime.grad_sq_norms()
        norm = math.sqrt(math.fsum(norms.values()))
        optimizer.step(schedule.at(step, len(train_batches)), clip_factor=min(1.0, GRAD_CLIP / (norm + 1e-6)))
        runtime.zero_grad()
        if step % 20 == 0 or step == len(train_batches) - 1:
            print(f"  {method.name}: step {step} loss {losses[-1]:.4f} ({time.perf_counter() - t0:.0f} s)", flush=True)
    runtime.observer = None
    micro = train_batches[0][0]
    return {
        "val_loss": local_validation(runtime, val).loss,
        "train_loss": losses[-1],
        "params": sum(p.numel() for p in runtime.parameters().values()),
        "activation_bytes": cut.activation,
        "gradient_bytes": cut.gradient,
        "fp32_bytes": fp32_frame_bytes((micro.shape[0], micro.shape[1] - 1, graph.out_features[ANCHOR.cut])),
        "seconds": time.perf_counter() - t0,
    }


def activation_rows(bench: Bench, quick: bool, steps: int | None = None, only: list[str] | None = None) -> None:
    """Train each method (the anchor always) and add its rows to `bench`."""
    steps = steps or (80 if quick else 300)
    val_windows = 16 if quick else 64
    torch.manual_seed(0)
    torch.set_num_threads(1)  # the machine is shared; every method gets the same
    ids, vocab = token_ids()
    context = network(ANCHOR).context
    split = ids.numel() * 9 // 10
    data = windows(ids[:split], steps * BATCH, context, seed=0).split(BATCH)
    train_batches = [list(b.split(BATCH // MICRO_BATCHES)) for b in data]
    val = list(windows(ids[split:], val_windows, context, seed=1).split(BATCH // MICRO_BATCHES))
    print(f"tiny-gpt on {len(ids):,} BPE tokens (vocabulary {vocab}): {steps} steps of {BATCH} x {context} "
          f"in {MICRO_BATCHES} micro-batches, validation on {val_windows} held-out windows, 1 thread")
    chosen = [m for m in METHODS if m is ANCHOR or m.name in only] if only else QUICK if quick else METHODS
    results = {m: train(m, train_batches, val) for m in chosen}
    base = results[ANCHOR]["val_loss"]
    for method, r in results.items():
        loss_ratio = r["val_loss"] / base
        same = results.get(SAME_UNCOMPRESSED[method.network])
        fields = dict(method=method.name, steps=steps, val_loss=r["val_loss"], val_loss_ratio_vs_uncompressed=loss_ratio,
                      val_loss_ratio_vs_same_network_uncompressed=same and r["val_loss"] / same["val_loss"],
                      network=method.network, cut=method.cut, params=r["params"], train_loss=r["train_loss"])
        for direction, sent in (("activations", r["activation_bytes"]), ("activation_grads", r["gradient_bytes"])):
            bytes_ratio = sent / r["fp32_bytes"]
            bench.row(f"tiny-gpt cut, {steps} steps: {method.name}, {direction}", "bytes/micro-batch", sent,
                      "one fp32 residual-stream tensor at tiny-gpt's cut", r["fp32_bytes"],
                      None if method is ANCHOR else at_most(BYTES_TARGET),
                      direction=direction, bytes_ratio_vs_fp32=bytes_ratio, **fields)
        if method is not ANCHOR:
            bench.row(f"tiny-gpt cut, {steps} steps: {method.name}, validation loss", "validation loss", r["val_loss"],
                      f"{ANCHOR.name} tiny-gpt's validation loss", base, None if quick else at_most(LOSS_TARGET),
                      direction="loss", **fields)
