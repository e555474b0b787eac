"""Dataset service benchmark: tokenization throughput, tokenizer training time, batch latency over NATS.

- tokenize: the service's tokenizing pass (documents -> token stream with document
  boundaries, as `create` runs it) against `tokenizers`' `Tokenizer.encode_batch` on the same
  documents already in memory (target >= 0.8 of its MB/s).
- train: the service's tokenizer training (its document reader feeding the trainer) for 8K and
  32K vocab against `Tokenizer.train` on the same file with the same settings.
- batch: p50/p99 latency of 16x256 `ca.ds.batch` requests to a real service subprocess over a
  real nats-server, against the same requests answered at once by a bare responder with as many
  bytes, on the same subject with the same credentials: what the service adds to the bus.

    python -m bench.dataset [--quick] [--json PATH] [--corpus FILE]
"""

from __future__ import annotations

import asyncio
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

from .common import Bench, at_least
from .sessions import SHAKESPEARE


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


def bench_tokenize(bench: Bench, corpus: Path, repeats: int, folder: Path) -> None:
    reader = Reader()
    scan = reader.scan([str(corpus)], DataRoots([corpus.parent]))
    request = CreateDataset(name="bench", files=[str(corpus)], vocab_size=8192)
    tokenizer = bpe.train(reader.documents(scan.files), 8192, scan.documents)
    documents = list(reader.documents(scan.files))
    eot = bpe.eot_id(tokenizer)

    def service() -> None:
        builder.tokenize_corpus(tokenizer, reader.documents(scan.files), scan, "uint16", eot, folder / "stream.tmp", request, lambda *a: None)

    anchor, ours = median_times(lambda: tokenizer.encode_batch(documents), service, repeats)
    bench.row(f"tokenize {scan.text_bytes / 1e6:.1f} MB in {scan.documents} documents", "MB/s",
              scan.text_bytes / ours / 1e6, "Tokenizer.encode_batch on them in memory", scan.text_bytes / anchor / 1e6,
              at_least(0.8))


def bench_train(bench: Bench, corpus: Path, vocab: int, repeats: int) -> None:
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
    bench.row(f"train a {vocab} BPE tokenizer", "s", ours, "Tokenizer.train on the same file", anchor)


def batch_request(step: int) -> BatchRequest:
    return BatchRequest(dataset="bench", split="train", seed=0, step=step, batch=16, context=256)


async def _batch_latencies(server: EmbeddedNats, corpus: Path, requests: int) -> tuple[list[float], int]:
    """Each request's seconds (after 10 that open the memory maps), and the bytes of a reply."""
    credential = server.credential("user")
    nc = await bus.connect(credential, name="bench-dataset")
    subjects = Subjects("ca")
    try:
        create = CreateDataset(name="bench", files=[str(corpus)], vocab_size=4096)
        await client.create_dataset(nc, subjects, credential.name, create, timeout=600)
        latencies = []
        batches = user_subject(subjects, credential.name, "batch")
        for step in range(requests + 10):
            start = time.perf_counter()
            await client.fetch_batch(nc, batches, batch_request(step), timeout=10)
            if step >= 10:
                latencies.append(time.perf_counter() - start)
        reply = await nc.request(batches, batch_request(0).model_dump_json().encode(), timeout=10)
        return latencies, len(reply.data)
    finally:
        await nc.close()


async def _bare_latencies(server: EmbeddedNats, reply_bytes: int, requests: int) -> list[float]:
    """The same requests answered at once with `reply_bytes` bytes, by a responder with the service's credential."""
    subjects = Subjects("ca")
    responder = await bus.connect(server.credential("dataset"), name="bench-bare-responder")
    user = server.credential("user")
    nc = await bus.connect(user, name="bench-dataset")
    batches = user_subject(subjects, user.name, "batch")
    reply = bytes(reply_bytes)

    async def answer(msg) -> None:
        await msg.respond(reply)

    try:
        await responder.subscribe(batches, cb=answer)
        await responder.flush()
        latencies = []
        for step in range(requests + 10):
            start = time.perf_counter()
            await nc.request(batches, batch_request(step).model_dump_json().encode(), timeout=10)
            if step >= 10:
                latencies.append(time.perf_counter() - start)
        return latencies
    finally:
        await nc.close()
        await responder.close()


def bench_batches(bench: Bench, corpus: Path, requests: int, folder: Path) -> None:
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
                    latencies, reply_bytes = asyncio.run(_batch_latencies(server, corpus, requests))
                    break
                except nats.errors.NoRespondersError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.2)
        finally:
            service.terminate()
            service.wait(15)
        bare = asyncio.run(_bare_latencies(server, reply_bytes, requests))
    for name, q in (("p50", 0.5), ("p99", 0.99)):
        bench.row(f"a 16 x 257 batch over NATS from the service, {name} of {requests}", "s", quantile(latencies, q),
                  f"a bare responder's reply of {reply_bytes} bytes, {name}", quantile(bare, q))


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> int:
    bench = Bench("dataset", __doc__, quick_help="one repeat, small corpus, fewer requests")
    bench.parser.add_argument("--corpus", type=Path, default=SHAKESPEARE, help="a text file (default: tinyshakespeare)")
    args = bench.parse()
    if args.corpus is None or not args.corpus.exists():
        bench.parser.error(f"corpus {args.corpus} not found; pass --corpus FILE")
    repeats, copies, requests = (1, 1, 200) if args.quick else (3, 4, 1000)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        corpus = corpus_file(args.corpus, copies, folder)
        bench_tokenize(bench, corpus, repeats, folder)
        for vocab in (8192, 32768):
            bench_train(bench, args.corpus, vocab, repeats)
        bench_batches(bench, corpus, requests, folder)
    return bench.finish()


if __name__ == "__main__":
    sys.exit(main())
