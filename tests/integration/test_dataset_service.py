"""The dataset service as a real subprocess against a real nats-server: create, get, batch, restarts, Object Store."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer, models

from computeall.cli.data_upload import send_files
from computeall.protocol import dataset_client as client
from computeall.protocol.credentials import LOCAL_USER
from computeall.protocol.dataset_api import BatchRequest, CreateDataset, SampleRequest, SplitSpec, user_subject
from computeall.cli.nats_server import EmbeddedNats
from computeall.protocol.subjects import Subjects

from .identities import connect_as
from .waiting import wait_until

SUBJECTS = Subjects("ca")
USER = LOCAL_USER  # whom `connect_as(server)` connects as


class DatasetProcess:
    """`python -m computeall.dataset` in its own process, with its own data directory; it reads files
    under `roots` (by default the test's folder) besides the stdlib."""

    def __init__(self, server: EmbeddedNats, data_dir: Path, roots: list[Path] | None = None) -> None:
        self.server = server
        self.data_dir = data_dir
        self.roots = [data_dir.parent] if roots is None else roots
        self.log = data_dir.parent / f"{data_dir.name}.log"
        self.process: subprocess.Popen | None = None

    def start(self) -> "DatasetProcess":
        seen = self.log.stat().st_size if self.log.exists() else 0  # a restart appends to the same log
        self.process = subprocess.Popen(
            [sys.executable, "-m", "computeall.dataset", "--credential", str(self.server.credential_file("dataset")),
             "--data-dir", str(self.data_dir), "--prefix", "ca",
             *(arg for root in self.roots for arg in ("--data-root", str(root)))],
            stdout=subprocess.DEVNULL,
            stderr=open(self.log, "ab"),
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        self._wait_ready(seen)
        return self

    def _wait_ready(self, seen: int, timeout: float = 20.0) -> None:
        """Its own log says so: a request could be answered by another instance of the queue group."""
        def ready() -> bool:
            assert self.process.poll() is None, f"dataset service exited; log:\n{self.log.read_text()}"
            return self.log.exists() and b"dataset service ready" in self.log.read_bytes()[seen:]

        wait_until(ready, timeout, "dataset service ready", interval=0.05)

    def stop(self) -> int:
        self.process.terminate()
        return self.process.wait(15)


@pytest.fixture
def service(nats_server: EmbeddedNats, tmp_path: Path):
    proc = DatasetProcess(nats_server, tmp_path / "data-a").start()
    yield proc
    if proc.process.poll() is None:
        proc.stop()


async def send(nc, subjects, user, paths, timeout):
    return await send_files(nc, subjects, user, paths, progress=False, wait_s=timeout)


async def call(server: EmbeddedNats, fn, *args, timeout: float = 60.0, user: str = USER):
    """`fn(nc, subjects, user, *args)` of `dataset_client`, connected as `user`."""
    nc = await connect_as(server, "user", user)
    try:
        return await fn(nc, SUBJECTS, user, *args, timeout=timeout)
    finally:
        await nc.close()


async def fetch_batch(nc, subjects: Subjects, user: str, request: BatchRequest, timeout: float):
    """A user's batch (PNodes ask on their own subject, for a session)."""
    return await client.fetch_batch(nc, user_subject(subjects, user, "batch"), request, timeout)


def batch_array(server: EmbeddedNats, request: BatchRequest, user: str = USER) -> np.ndarray:
    dtype, shape, data = asyncio.run(call(server, fetch_batch, request, user=user))
    return np.frombuffer(bytes(data), dtype=np.dtype(dtype).newbyteorder("<")).reshape(shape)


def test_create_get_batch_restart_and_fetch_elsewhere(service: DatasetProcess, nats_server: EmbeddedNats, shakespeare: Path, tmp_path: Path):
    sent = asyncio.run(call(nats_server, send, [str(shakespeare)]))  # outside the service's roots: uploaded
    assert sent.files == [] and [u.name for u in sent.uploads] == ["tinyshakespeare.txt"]
    assert sent.uploaded_bytes == shakespeare.stat().st_size
    request = CreateDataset(name="shk", uploads=sent.uploads, vocab_size=1024, split=SplitSpec(method="random-doc", fraction=0.1), shard_tokens=1 << 16)
    manifest = asyncio.run(call(nats_server, client.create_dataset, request))
    assert manifest["name"] == "shk" and manifest["vocab_size"] == 1024 and manifest["dtype"] == "uint16"
    assert set(manifest["splits"]) == {"train", "val"}
    assert len(manifest["splits"]["train"]["shards"]) > 1  # several fixed-size shards
    assert manifest == asyncio.run(call(nats_server, client.get_dataset, "shk"))

    req = BatchRequest(dataset="shk", split="train", seed=3, step=5, micro=1, micro_batches=2, batch=16, context=256)
    first = batch_array(nats_server, req)
    assert first.shape == (16, 257) and first.dtype == np.uint16 and first.max() < 1024
    assert service.stop() == 0  # SIGTERM: clean exit

    service.start()  # same data directory: the same batch
    assert np.array_equal(first, batch_array(nats_server, req))

    # another service with an empty data directory fetches the shards through the Object Store
    service.stop()
    other = DatasetProcess(nats_server, tmp_path / "data-b").start()
    try:
        assert np.array_equal(first, batch_array(nats_server, req))
        assert (tmp_path / "data-b" / "datasets" / "shk" / "manifest.json").exists()
        samples = asyncio.run(call(nats_server, client.sample_text, SampleRequest(dataset="shk", split="val", n=2, context=64)))
        assert len(samples) == 2 and all(len(s) > 20 for s in samples)
        again = asyncio.run(call(nats_server, client.create_dataset, request.model_copy(update={"if_exists": "reuse"})))
        assert again["recipe_digest"] == manifest["recipe_digest"]
    finally:
        other.stop()


def test_bad_requests_get_clear_errors(service: DatasetProcess, nats_server: EmbeddedNats, tmp_path: Path):
    async def raw(subject: str, payload: bytes) -> dict:
        nc = await connect_as(nats_server)
        try:
            return json.loads((await nc.request(subject, payload, timeout=10)).data)
        finally:
            await nc.close()

    bad = asyncio.run(raw(user_subject(SUBJECTS, USER, "batch"), b"not json"))
    assert bad["ok"] is False and "invalid batch request" in bad["error"]
    bad = asyncio.run(raw(user_subject(SUBJECTS, USER, "create"), json.dumps({"name": "x", "files": ["a"], "vocab_size": 100}).encode()))
    assert "below the byte alphabet" in bad["error"]
    with pytest.raises(client.DatasetError, match="no dataset named 'nope'"):
        batch_array(nats_server, BatchRequest(dataset="nope", step=0, batch=1, context=8))
    missing = str(tmp_path / "missing.txt")
    with pytest.raises(client.DatasetError, match="no such file"):
        asyncio.run(call(nats_server, client.create_dataset, CreateDataset(name="m", files=[missing], vocab_size=300)))
    assert service.process.poll() is None  # still serving


def test_failed_creates_leave_nothing_behind(service: DatasetProcess, nats_server: EmbeddedNats, tmp_path: Path):
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"fine text\n\nthen \xff\xfe broken")
    with pytest.raises(client.DatasetError, match=r"bad.txt: invalid UTF-8 at byte offset 16.*--skip-invalid-utf8"):
        asyncio.run(call(nats_server, client.create_dataset, CreateDataset(name="bad", files=[str(bad)], vocab_size=300)))
    one_doc = tmp_path / "one.txt"
    one_doc.write_text("a single document " * 50)
    # fails after the tokenizer is trained: the split needs two documents
    with pytest.raises(client.DatasetError, match="needs at least 2"):
        asyncio.run(call(nats_server, client.create_dataset, CreateDataset(name="one", files=[str(one_doc)], vocab_size=300, document_unit="file")))
    assert list((service.data_dir / "datasets").iterdir()) == []  # no dataset, no staging folder
    assert asyncio.run(call(nats_server, client.list_datasets)) == []  # nothing published either
    with pytest.raises(client.DatasetError, match="no dataset named 'one'"):
        asyncio.run(call(nats_server, client.get_dataset, "one"))

    skipped = asyncio.run(call(nats_server, client.create_dataset, CreateDataset(name="skip", files=[str(bad), str(one_doc)], vocab_size=300, on_invalid_utf8="skip")))
    assert skipped["skipped_invalid_utf8"] == 1 and skipped["documents"] == 2


def test_jsonl_duplicate_name_tokenizer_reuse_and_events(service: DatasetProcess, nats_server: EmbeddedNats, tmp_path: Path):
    data = tmp_path / "docs.jsonl"
    data.write_text("\n".join(json.dumps({"content": f"record {i} says " + "hello world " * (i % 5 + 1)}) for i in range(200)))
    request = CreateDataset(name="js", files=[str(data)], vocab_size=320, jsonl_field="content", split=SplitSpec(method="hash-doc", fraction=0.2))
    first = asyncio.run(call(nats_server, client.create_dataset, request))
    assert first["documents"] == 200
    with pytest.raises(client.DatasetError, match="dataset 'js' already exists; choose another name"):
        asyncio.run(call(nats_server, client.create_dataset, request))
    with pytest.raises(client.DatasetError, match="already exists with other inputs"):
        asyncio.run(call(nats_server, client.create_dataset, request.model_copy(update={"vocab_size": 300, "if_exists": "reuse"})))
    reused = asyncio.run(call(nats_server, client.create_dataset, CreateDataset(name="js2", files=[str(data)], jsonl_field="content", tokenizer_from="js")))
    assert reused["tokenizer"]["digest"] == first["tokenizer"]["digest"] and reused["tokenizer"]["tokenizer_from"] == "js"
    with pytest.raises(client.DatasetError, match="--tokenizer-from 'nope': no such dataset of yours or public"):
        asyncio.run(call(nats_server, client.create_dataset, CreateDataset(name="js3", files=[str(data)], jsonl_field="content", tokenizer_from="nope")))

    async def events() -> list[str]:
        from computeall.protocol.eventlog import EventLog
        from computeall.protocol.events import EventEnvelope

        nc = await connect_as(nats_server, "monitor")  # the monitor reads the whole log
        try:
            records = await EventLog(nc.jetstream(), SUBJECTS).read(SUBJECTS.dataset_evt("js", ">"))
            return [EventEnvelope.model_validate_json(r.data).type for r in records]
        finally:
            await nc.close()

    assert asyncio.run(events()) == ["TokenizerTrained", "Tokenized", "SplitCreated", "SplitCreated", "DatasetCreated"]

    # prompts and generated ids through the dataset's tokenizer: a prompt starts a new document
    encoded = asyncio.run(call(nats_server, client.encode_prompts, "js", ["record 7 says", ""]))
    assert encoded.eot_id is not None and encoded.vocab_size == first["vocab_size"]
    assert [ids[0] for ids in encoded.tokens] == [encoded.eot_id] * 2 and encoded.tokens[1] == [encoded.eot_id]
    assert asyncio.run(call(nats_server, client.decode_tokens, "js", encoded.tokens)) == ["record 7 says", ""]
    with pytest.raises(client.DatasetError, match="no dataset named 'nope'"):
        asyncio.run(call(nats_server, client.encode_prompts, "nope", ["x"]))


def test_vocab_262144_serves_uint32_batches(service: DatasetProcess, nats_server: EmbeddedNats, tmp_path: Path):
    rng = np.random.default_rng(1)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    words = ["".join(w) for w in letters[rng.integers(0, 26, size=(60_000, 5))]]  # enough distinct words for > 65,536 merges
    corpus = tmp_path / "words.txt"
    corpus.write_text("\n\n".join(" ".join(words[i : i + 100]) for i in range(0, len(words), 100)))
    manifest = asyncio.run(call(nats_server, client.create_dataset, CreateDataset(name="big", files=[str(corpus)], vocab_size=262144)))
    assert manifest["vocab_size"] > 65536 and manifest["dtype"] == "uint32"
    batch = batch_array(nats_server, BatchRequest(dataset="big", step=0, batch=16, context=256))
    assert batch.dtype == np.uint32 and batch.shape == (16, 257) and batch.max() > 65535


def test_cli_create_list_show_sample(service: DatasetProcess, nats_server: EmbeddedNats, tmp_path: Path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for i in range(3):
        (corpus / f"part{i}.txt").write_text("\n\n".join(f"Paragraph {j} of part {i}: the quick brown fox jumps." for j in range(40)))

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "computeall.cli.main", "dataset", *args, "--credential", str(nats_server.credential_file("user"))],
            capture_output=True, text=True, timeout=60,
        )

    created = cli("create", "fox", "--files", str(corpus), "--vocab-size", "300", "--split", "tail:0.2", "--json")
    assert created.returncode == 0, created.stderr
    assert 20 <= json.loads(created.stdout)["splits"]["val"]["documents"] <= 25  # the last ~fifth of 120 documents
    listed = json.loads(cli("list", "--json").stdout)
    assert [d["name"] for d in listed] == ["fox"] and listed[0]["tokens"]["val"] > 0
    assert (listed[0]["owner"], listed[0]["public"]) == (USER, False)
    shared = cli("share", "fox")
    assert shared.returncode == 0 and "dataset fox is public" in shared.stdout, shared.stderr
    assert json.loads(cli("list", "--json").stdout)[0]["public"] is True
    assert "yours alone" in cli("share", "fox", "--private").stdout
    shown = cli("show", "fox")
    assert shown.returncode == 0 and "tail:0.2" in shown.stdout and "shards/val-00000.bin" in shown.stdout
    sampled = cli("sample", "fox", "--split", "val", "--n", "2", "--context", "16")
    assert sampled.returncode == 0 and sampled.stdout.count("--- sample") == 2 and "Paragraph" in sampled.stdout

    # a tokenizer.json of its own (here the fox dataset's, copied outside the service's roots: uploaded)
    tokenizer_json = tmp_path / "hf" / "tokenizer.json"
    tokenizer_json.parent.mkdir()
    shutil.copyfile(next((tmp_path / "data-a").rglob("tokenizer.json")), tokenizer_json)
    from_file = cli("create", "fox2", "--files", str(corpus), "--tokenizer-file", str(tokenizer_json), "--json")
    assert from_file.returncode == 0, from_file.stderr
    tokenizer = json.loads(from_file.stdout)["tokenizer"]
    assert tokenizer["digest"] == json.loads(created.stdout)["tokenizer"]["digest"] and not tokenizer["trained"]
    assert tokenizer["tokenizer_from"].startswith("file tokenizer.json ")
    not_json = tmp_path / "not.json"
    not_json.write_text("{ nope")
    no_eot = tmp_path / "no-eot.json"
    Tokenizer(models.BPE()).save(str(no_eot))
    for bad, reason in ((not_json, "not a tokenizers JSON file"), (no_eot, "has no <|endoftext|> token")):
        refused = cli("create", "fox3", "--files", str(corpus), "--tokenizer-file", str(bad))
        assert refused.returncode == 2 and reason in refused.stderr and "Traceback" not in refused.stderr, refused.stderr

    duplicate = cli("create", "fox", "--files", str(corpus))
    assert duplicate.returncode == 2 and "error: dataset 'fox' already exists" in duplicate.stderr
    assert "Traceback" not in duplicate.stderr
    unknown = cli("sample", "fox", "--split", "test")
    assert unknown.returncode == 2 and "has no split 'test'; its splits are train, val" in unknown.stderr


def test_two_instances_share_the_load_and_agree(service: DatasetProcess, nats_server: EmbeddedNats, tmp_path: Path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n\n".join(f"document {i} " + "lorem ipsum dolor sit amet " * (i % 9 + 1) for i in range(300)))
    asyncio.run(call(nats_server, client.create_dataset, CreateDataset(name="shared", files=[str(corpus)], vocab_size=400, shard_tokens=1024)))
    requests = [BatchRequest(dataset="shared", seed=9, step=s, batch=4, context=32) for s in range(24)]
    alone = [batch_array(nats_server, r) for r in requests]

    other = DatasetProcess(nats_server, tmp_path / "data-b").start()
    try:
        async def together():
            nc = await connect_as(nats_server)
            try:
                return await asyncio.gather(*(fetch_batch(nc, SUBJECTS, USER, r, timeout=30) for r in requests))
            finally:
                await nc.close()

        for expected, (dtype, shape, data) in zip(alone, asyncio.run(together())):
            assert np.array_equal(expected, np.frombuffer(bytes(data), dtype=dtype).reshape(shape))
        # the queue group spread the requests: the second instance fetched the dataset to answer its share
        assert (tmp_path / "data-b" / "datasets" / "shared" / "manifest.json").exists()
    finally:
        other.stop()
