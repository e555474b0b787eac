"""Compressed pipeline edges on tiny-gpt: bytes on the cut edge against fp32, and the validation loss.

Each method is a network (METHODS): tiny-gpt as it is (fp32, the anchor), tiny-gpt with the int8 wire,
and tiny-gpt-wan (a learned bottleneck where two PNodes cut it, int8 on its narrow edge) at rank 8 and
16, and at full width (rank 256, fp32: the same network uncompressed). Losses are compared with
tiny-gpt's (`val_loss_ratio_vs_uncompressed`, the anchor) and with the same network's uncompressed form
(`val_loss_ratio_vs_same_network_uncompressed`). Each trains the same steps on the same tokens with the
same seed, in one process through the code a PNode runs (`local_step`: VNode by VNode, every edge
through its wire format, so 1 PNode and K give these bits) with a session's defaults (AdamW, warmup and
cosine, global gradient clipping at 1.0), then measures its loss on held-out tokens.

Bytes are counted where two PNodes cut the network (`cut`): the frames a PNode sends for one
micro-batch's activation there and for the gradients of it that come back, one per reader
(`tensorcore.wire`: header, values, int8 scales), against the frames of one fp32 residual-stream tensor
at the same place of the uncompressed network. (tiny-gpt's own cut reads 0.5 for its gradients: a
block boundary has two readers, the norm and the residual add, and each sends its gradient back.) The
tokens a PNode after a bottleneck reads from the dataset service (2 bytes a token) are not a pipeline
edge. Replica syncs (direction `pseudo_grads`) are bench/replicas.py's.

Tokens: Tiny Shakespeare (`../shared/data/tinyshakespeare.txt`) through a 4096-token byte-level BPE trained on
it as the dataset service trains one; its last tenth is the validation split.

    python bench/compression.py [--quick] [--steps N] [--json PATH]

`--quick`: 80 steps, the anchor against rank 16 only (about 10 minutes on two busy cores); the full run
trains every method for 300 steps (an hour or more there).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from computeall.dataset.tokenizer import eot_id, train as train_tokenizer  # noqa: E402
from computeall.network import Graph, NetworkSpec, load_network  # noqa: E402
from computeall.protocol.config import LrSchedule, OptimizerConfig  # noqa: E402
from computeall.tensorcore.local_step import local_step, local_validation  # noqa: E402
from computeall.tensorcore.optimizer import VNodeOptimizer  # noqa: E402
from computeall.tensorcore.vnode_runtime import VNodeRuntime  # noqa: E402
from computeall.tensorcore.wire import encoded_frames  # noqa: E402
from computeall.tensorcore.wire_formats import wire_format  # noqa: E402

RESULTS = REPO / "bench" / "results"
NETWORKS = REPO / "examples" / "networks"
SHAKESPEARE = next((p / "shared" / "data" / "tinyshakespeare.txt" for p in REPO.parents
                    if (p / "shared" / "data" / "tinyshakespeare.txt").exists()), None)
CHUNK_BYTES = 1 << 20  # a PNode's frames stay below the server's max_payload
TARGET_RATIO = 32.0  # the floor: pipeline edges at least 32x smaller than fp32
TARGET_LOSS = 1.02  # within 2% of the uncompressed network's validation loss
GRAD_CLIP = 1.0  # a session's default


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


def rows(results: dict[Method, dict], steps: int, tokens_per_step: int) -> list[dict]:
    base = results[ANCHOR]["val_loss"]
    out = []
    for method, r in results.items():
        loss_ratio = r["val_loss"] / base
        same = results.get(SAME_UNCOMPRESSED[method.network])
        for direction, sent in (("activations", r["activation_bytes"]), ("activation_grads", r["gradient_bytes"])):
            ratio = r["fp32_bytes"] / sent
            out.append({
                "bench": "compression", "name": f"{method.name} {direction}", "method": method.name,
                "direction": direction, "bytes_ratio_vs_fp32": ratio, "val_loss": r["val_loss"],
                "val_loss_ratio_vs_uncompressed": loss_ratio, "steps": steps,
                "val_loss_ratio_vs_same_network_uncompressed": same and r["val_loss"] / same["val_loss"],
                "metric": "bytes_ratio_vs_fp32", "value": ratio, "anchor": ANCHOR.name, "anchor_value": 1.0,
                "ratio": ratio, "target": TARGET_RATIO, "loss_target": TARGET_LOSS,
                "holds": ratio >= TARGET_RATIO and loss_ratio <= TARGET_LOSS,
                "network": method.network, "cut": method.cut, "bytes_per_micro_batch": sent,
                "fp32_bytes_per_micro_batch": r["fp32_bytes"], "params": r["params"], "train_loss": r["train_loss"],
                "tokens_per_step": tokens_per_step, "seconds": r["seconds"],
            })
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--steps", type=int)
    parser.add_argument("--method", action="append", choices=[m.name for m in METHODS],
                        help="train only these (the anchor always)")
    parser.add_argument("--json", type=Path, default=RESULTS / "compression.json")
    args = parser.parse_args()
    steps = args.steps or (80 if args.quick else 300)
    batch, micro_batches, val_windows = 8, 4, 16 if args.quick else 64
    torch.manual_seed(0)
    torch.set_num_threads(1)  # the machine is shared; every method gets the same
    ids, vocab = token_ids()
    context = network(ANCHOR).context
    split = ids.numel() * 9 // 10
    data = windows(ids[:split], steps * batch, context, seed=0).split(batch)
    train_batches = [list(b.split(batch // micro_batches)) for b in data]
    val = list(windows(ids[split:], val_windows, context, seed=1).split(batch // micro_batches))
    print(f"tiny-gpt on {len(ids):,} BPE tokens (vocabulary {vocab}): {steps} steps of {batch} x {context} "
          f"in {micro_batches} micro-batches, validation on {val_windows} held-out windows")
    chosen = [m for m in METHODS if m is ANCHOR or m.name in args.method] if args.method else QUICK if args.quick else METHODS
    results = {}
    for m in chosen:
        results[m] = train(m, train_batches, val)
        print(f"  {m.name}: validation loss {results[m]['val_loss']:.4f}", flush=True)
    table = rows(results, steps, batch * context)
    print(f"{'method':<28}{'direction':<18}{'bytes/micro':>12}{'vs fp32':>9}{'val loss':>10}{'vs tiny-gpt':>12}"
          f"{'vs same net':>12}  holds")
    for r in table:
        same = r["val_loss_ratio_vs_same_network_uncompressed"]
        print(f"{r['method']:<28}{r['direction']:<18}{r['bytes_per_micro_batch']:>12,}{r['bytes_ratio_vs_fp32']:>8.1f}x"
              f"{r['val_loss']:>10.4f}{r['val_loss_ratio_vs_uncompressed']:>12.4f}{same or float('nan'):>12.4f}  {r['holds']}")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(table, indent=1) + "\n")
    print(f"results in {args.json}")


if __name__ == "__main__":
    main()
