"""Dataset service benchmark: tokenization throughput, tokenizer training time, batch latency over NATS.

Anchors are `tokenizers` called directly on the same text:
- tokenize: the service's tokenizing pass (documents -> token stream with document
  boundaries, as `create` runs it) against `Tokenizer.encode_batch` on the same
  documents already in memory; ratio = anchor time / service time (target >= 0.8).
- train: the service's tokenizer training (its document reader feeding the trainer)
  for 8K and 32K vocab against `Tokenizer.train` on the same file with the same
  settings; ratio = anchor time / service time.
- batch: p50/p99 latency of 16x256 `ca.ds.batch` requests to a real service
  subprocess over a real nats-server.

    .venv/bin/python bench/dataset.py [--quick] [--corpus FILE]

Prints the figures and writes bench/results/dataset.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nats.errors
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from computeall.cli.nats_server import EmbeddedNats
from computeall.protocol import bus
from computeall.dataset import builder, tokenizer as bpe
from computeall.dataset.data_roots import DataRoots
from computeall.dataset.sources import Reader
from computeall.protocol import dataset_client as client
from computeall.protocol.dataset_api import SPECIAL_TOKENS, BatchRequest, CreateDataset, user_subject
from computeall.protocol.subjects import Subjects

REPO = Path(__file__).resolve().parent.parent
SHAKESPEARE = REPO.parent / "shared" / "data" / "tinyshakespeare.txt"
RESULTS = REPO / "bench" / "results" / "dataset.json"


def median_times(anchor, ours, repeats: int) -> tuple[float, float]:
    """Median seconds of each, run alternately so that a load change on a shared machine hits both."""
    times: dict[str, list[float]] = {"anchor": [], "ours": []}
    for _ in range(repeats):
        for key, fn in (("anchor", anchor), ("ours", ours)):
            start = time.perf_counter()
            fn()
            times[key].append(time.perf_counter() - start)
    return statistics.median(times["anchor"]), statistics.median(times["ours"])


def corpus_file(source: Path, copies: int, folder: Path) -> Path:
    """`copies` copies of the source, so throughput is measured on more than a toy size."""
    path = folder / "corpus.txt"
    text = source.read_text()
    path.write_text("\n\n".join([text] * copies))
    return path


def bench_tokenize(corpus: Path, repeats: int, folder: Path) -> dict:
    reader = Reader()
    scan = reader.scan([str(corpus)], DataRoots([corpus.parent]))
    request = CreateDataset(name="bench", files=[str(corpus)], vocab_size=8192)
    tokenizer = bpe.train(reader.documents(scan.files), 8192, scan.documents)
    documents = list(reader.documents(scan.files))
    eot = bpe.eot_id(tokenizer)

    def service() -> None:
        builder.tokenize_corpus(tokenizer, reader.documents(scan.files), scan, "uint16", eot, folder / "stream.tmp", request, lambda *a: None)

    anchor, ours = median_times(lambda: tokenizer.encode_batch(documents), service, repeats)
    return {
        "text_bytes": scan.text_bytes,
        "documents": scan.documents,
        "service_s": ours,
        "encode_batch_s": anchor,
        "service_MBps": scan.text_bytes / ours / 1e6,
        "encode_batch_MBps": scan.text_bytes / anchor / 1e6,
        "ratio": anchor / ours,
    }


def bench_train(corpus: Path, vocab: int, repeats: int) -> dict:
    reader = Reader()
    scan = reader.scan([str(corpus)], DataRoots([corpus.parent]))

    def service() -> Tokenizer:
        return bpe.train(reader.documents(scan.files), vocab, scan.documents)

    def direct() -> Tokenizer:
        tokenizer = Tokenizer(models.BPE())
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tokenizer.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=vocab, special_tokens=SPECIAL_TOKENS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
        )
        tokenizer.train([str(corpus)], trainer)
        return tokenizer

    anchor, ours = median_times(direct, service, repeats)
    return {
        "requested_vocab": vocab,
        "real_vocab": service().get_vocab_size(),
        "service_s": ours,
        "tokenizers_s": anchor,
        "ratio": anchor / ours,
    }


async def _batch_latencies(server: EmbeddedNats, corpus: Path, requests: int) -> list[float]:
    credential = server.credential("user")
    nc = await bus.connect(credential, name="bench-dataset")
    subjects = Subjects("ca")
    try:
        create = CreateDataset(name="bench", files=[str(corpus)], vocab_size=4096)
        await client.create_dataset(nc, subjects, credential.name, create, timeout=600)
        latencies = []
        for step in range(requests + 10):
            request = BatchRequest(dataset="bench", split="train", seed=0, step=step, batch=16, context=256)
            start = time.perf_counter()
            await client.fetch_batch(nc, user_subject(subjects, credential.name, "batch"), request, timeout=10)
            if step >= 10:  # the first requests open the memory maps
                latencies.append(time.perf_counter() - start)
        return latencies
    finally:
        await nc.close()


def bench_batches(corpus: Path, requests: int, folder: Path) -> dict:
    with EmbeddedNats(folder / "nats") as server:
        service = subprocess.Popen(
            [sys.executable, "-m", "computeall.dataset", "--credential", str(server.credential_file("dataset")),
             "--data-dir", str(folder / "data"), "--data-root", str(corpus.parent)],
            stderr=open(folder / "service.log", "wb"),
        )
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    latencies = asyncio.run(_batch_latencies(server, corpus, requests))
                    break
                except nats.errors.NoRespondersError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.2)
        finally:
            service.terminate()
            service.wait(15)
    latencies.sort()
    return {
        "batch": [16, 257],
        "requests": len(latencies),
        "p50_ms": 1e3 * latencies[len(latencies) // 2],
        "p99_ms": 1e3 * latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="one repeat, small corpus, fewer requests")
    parser.add_argument("--corpus", type=Path, default=SHAKESPEARE, help="a text file (default: tinyshakespeare)")
    args = parser.parse_args()
    if not args.corpus.exists():
        print(f"corpus {args.corpus} not found; pass --corpus FILE", file=sys.stderr)
        return 2
    repeats, copies, requests = (1, 1, 200) if args.quick else (3, 4, 1000)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        corpus = corpus_file(args.corpus, copies, folder)
        results = {
            "corpus": str(args.corpus),
            "copies": copies,
            "repeats": repeats,
            "cpus": os.cpu_count(),
            "tokenize": bench_tokenize(corpus, repeats, folder),
            "train": [bench_train(args.corpus, vocab, repeats) for vocab in (8192, 32768)],
            "batch_latency": bench_batches(corpus, requests, folder),
        }
    t = results["tokenize"]
    print(f"tokenize  service {t['service_MBps']:.2f} MB/s  encode_batch {t['encode_batch_MBps']:.2f} MB/s  ratio {t['ratio']:.2f} (target >= 0.8)")
    for r in results["train"]:
        print(f"train {r['requested_vocab']:>6} (real {r['real_vocab']})  service {r['service_s']:.2f}s  tokenizers {r['tokenizers_s']:.2f}s  ratio {r['ratio']:.2f}")
    b = results["batch_latency"]
    print(f"batch 16x257 over NATS  p50 {b['p50_ms']:.2f} ms  p99 {b['p99_ms']:.2f} ms  ({b['requests']} requests)")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {RESULTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
