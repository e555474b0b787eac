"""Generation speed: `computeall generate`'s KV-cache sampler against transformers' `generate` on the export.

tiny-gpt (examples/networks/tiny-gpt.yaml, seeded weights) is loaded as `computeall generate`
loads a checkpoint (`TrainedModel`), exported with `computeall.tensorcore.hf_export` and loaded
back with `AutoModelForCausalLM`. Both decode greedily from the same prompt ids, the same number
of new tokens (transformers may not stop early), on the same torch threads; the rows are new
tokens per second (median of the repeats) and the ratio ours / transformers (target >= 1.0).
Both also return their tokens, which must be the same sequence (a row: tokens equal / tokens).

    python -m bench.generate [--quick] [--threads N] [--json PATH]
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from computeall.network import Graph
from computeall.protocol.dataset_api import EOT_TOKEN, PAD_TOKEN
from computeall.protocol.sampling import SamplingConfig
from computeall.tensorcore.generation import Generator
from computeall.tensorcore.hf_export import export_llama
from computeall.tensorcore.trained_model import TrainedModel, inference_network
from computeall.tensorcore.vnode_runtime import VNodeRuntime

from .common import REPO, Bench, at_least, exactly

NETWORK = REPO / "examples" / "networks" / "tiny-gpt.yaml"


def tokenizer_json() -> bytes:
    from computeall.dataset.tokenizer import train

    docs = [p.read_text() for p in sorted((REPO / "libs").rglob("*.py"))[:40]]
    return train(docs, 1024, len(docs)).to_str().encode()


def tokens_per_second(run, new_tokens: int, repeats: int) -> tuple[float, list[int]]:
    run()  # warm-up
    times, out = [], []
    for _ in range(repeats):
        start = time.perf_counter()
        out = run()
        times.append(time.perf_counter() - start)
    return new_tokens / statistics.median(times), out


def main() -> int:
    bench = Bench("generate", __doc__, quick_help="fewer tokens and repeats")
    bench.parser.add_argument("--threads", type=int, default=None, help="torch threads for both (default: torch's)")
    args = bench.parse()
    if args.threads:
        torch.set_num_threads(args.threads)
    new_tokens, repeats = (32, 3) if args.quick else (192, 5)

    spec = inference_network(NETWORK.read_text())
    runtime = VNodeRuntime(Graph(spec), Graph(spec).order, 0, torch.device("cpu"))
    model = TrainedModel.from_weights(spec, {k: p.detach() for k, p in runtime.parameters().items()})
    generator = Generator(model)
    prompt = torch.randint(0, 1024, (1, 32), generator=torch.Generator().manual_seed(0))

    from transformers import AutoModelForCausalLM, logging as hf_logging

    hf_logging.set_verbosity_error()
    with tempfile.TemporaryDirectory() as out:
        export_llama(model, tokenizer_json(), Path(out), EOT_TOKEN, PAD_TOKEN)
        hf = AutoModelForCausalLM.from_pretrained(out).eval()

    sampling = SamplingConfig(max_new_tokens=new_tokens, temperature=0)
    ours, ours_tokens = tokens_per_second(lambda: list(generator.generate(prompt[0].tolist(), sampling)), new_tokens, repeats)

    def theirs_run() -> list[int]:
        with torch.inference_mode():
            ids = hf.generate(prompt, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False,
                              pad_token_id=hf.config.pad_token_id)
        return ids[0, prompt.shape[1]:].tolist()

    theirs, theirs_tokens = tokens_per_second(theirs_run, new_tokens, repeats)
    name = f"{spec.name}: {new_tokens} new tokens after {prompt.shape[1]}, greedy, {torch.get_num_threads()} threads"
    bench.row(f"{name}, KV cache", "tokens/s", ours, "transformers.generate on the export", theirs, at_least(1.0))
    same = sum(a == b for a, b in zip(ours_tokens, theirs_tokens)) if len(ours_tokens) == len(theirs_tokens) else 0
    bench.row(f"{name}, the same tokens", "tokens equal", same, "tokens generated", new_tokens, exactly(1.0))
    return bench.finish()


if __name__ == "__main__":
    sys.exit(main())
