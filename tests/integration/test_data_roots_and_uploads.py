"""Data comes from clients, not from server paths: a dataset service with only its default roots
refuses every other path, and takes files through the uploads bucket instead (resumable, checked)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from computeall.cli.data_upload import send_files
from computeall.cli.nats_server import EmbeddedNats
from computeall.protocol import dataset_client as client
from computeall.protocol.dataset_api import CreateDataset, LocalFile, LocateFiles, SampleRequest
from computeall.protocol.subjects import Subjects
from computeall.protocol.uploads import UploadedFile, manifest_of, part_object, upload

from .identities import connect_as
from .test_dataset_service import USER, DatasetProcess

SUBJECTS = Subjects("ca")


@pytest.fixture
def service(nats_server: EmbeddedNats, tmp_path: Path):
    shared = tmp_path / "shared"  # the one folder the operator lets it read, besides the stdlib
    shared.mkdir()
    proc = DatasetProcess(nats_server, tmp_path / "service", roots=[shared]).start()
    yield proc
    if proc.process.poll() is None:
        proc.stop()


def corpus(path: Path, documents: int = 400) -> Path:
    path.write_text("\n\n".join(f"document {i}: " + "the quick brown fox jumps over the lazy dog " * (i % 7 + 1)
                                for i in range(documents)))
    return path


async def connected(server: EmbeddedNats, work):
    nc = await connect_as(server)
    try:
        return await work(nc)
    finally:
        await nc.close()


def test_paths_outside_the_data_roots_are_refused_and_the_service_keeps_answering(service, nats_server, tmp_path):
    """The security story: `sample` once returned /etc/passwd verbatim."""
    mine = corpus(tmp_path / "mine.txt")
    link = tmp_path / "shared" / "link.txt"  # inside a root, pointing out of it
    link.symlink_to("/etc/passwd")
    uploads = tmp_path / "service" / "uploads"  # other users' uploads are not read by path

    async def story(nc):
        refusals = []
        for path in ("/etc/passwd", str(mine), str(link), str(tmp_path / "missing.txt"), str(uploads)):
            with pytest.raises(client.DatasetError) as info:
                await client.create_dataset(nc, SUBJECTS, USER, CreateDataset(name="leak", files=[path], vocab_size=300), timeout=30)
            refusals.append(str(info.value))
        probe = LocateFiles(files=[LocalFile(path="/etc/passwd", sha256="0" * 64, size=1)])
        located = await client.locate_files(nc, SUBJECTS, USER, probe, timeout=30)
        started = time.monotonic()
        datasets = await client.list_datasets(nc, SUBJECTS, USER, timeout=30)
        return refusals, located, datasets, time.monotonic() - started

    refusals, located, datasets, answered_s = asyncio.run(connected(nats_server, story))
    for reason in refusals:
        assert "outside the dataset service's data roots" in reason and "--data-root" in reason and "upload" in reason
        assert "no such file" not in reason and "root:" not in reason, "nothing about what lies outside is told"
    assert located == [] and datasets == []
    assert answered_s < 1.0 and service.process.poll() is None, "answering within a second, never restarted"


def test_an_interrupted_upload_resumes_and_a_bad_part_is_sent_again(service, nats_server, tmp_path):
    path = corpus(tmp_path / "big.txt", documents=3000)
    manifest = manifest_of(path, part_bytes=64 << 10)
    assert len(manifest.parts) >= 6

    class Interrupted(Exception):
        pass

    async def story(nc):
        store = await nc.jetstream().object_store(await client.open_uploads(nc, SUBJECTS, USER, timeout=30))
        done = []

        def stop_after_three(size: int) -> None:
            done.append(size)
            if len(done) == 3:
                raise Interrupted  # as a client killed mid-upload
        with pytest.raises(Interrupted):
            await upload(store, path, manifest, progress=stop_after_three)
        resumed = await upload(store, path, manifest)
        # a user with write access to the bucket replaces a part: the service notices, drops it, asks for it again
        await store.put(part_object(manifest.parts[1]), b"forged" * 1000)
        forged = CreateDataset(name="forged", uploads=[resumed.file], vocab_size=300)
        with pytest.raises(client.DatasetError, match=r"part 2 of big.txt does not match its digest \(it was removed\)"):
            await client.create_dataset(nc, SUBJECTS, USER, forged, timeout=60)
        again = await upload(store, path, manifest)
        built = await client.create_dataset(nc, SUBJECTS, USER, forged.model_copy(update={"name": "fixed"}), timeout=60)
        return resumed, again, built

    resumed, again, built = asyncio.run(connected(nats_server, story))
    assert (resumed.parts_found, resumed.parts_sent) == (3, len(manifest.parts) - 3), "the retry sent only what was missing"
    assert (again.parts_found, again.parts_sent) == (len(manifest.parts) - 1, 1)
    assert resumed.file == UploadedFile(name="big.txt", sha256=manifest.sha256, size=path.stat().st_size)
    assert built["documents"] == 3000
    local = tmp_path / "service" / "uploads" / USER / manifest.sha256 / "big.txt"
    assert local.read_bytes() == path.read_bytes(), "the service's copy is the client's file"


def test_the_cli_uploads_what_the_service_cannot_read_and_uses_paths_it_can(service, nats_server, tmp_path):
    folder = tmp_path / "texts"
    folder.mkdir()
    corpus(folder / "a.txt")
    (folder / "b.jsonl").write_text("\n".join(json.dumps({"text": f"record {i} " + "hello " * (i % 5 + 1)}) for i in range(200)))

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "computeall.cli.main", "dataset", *args, "--quiet",
                               "--credential", str(nats_server.credential_file("user"))],
                              capture_output=True, text=True, timeout=120)

    created = cli("create", "remote", "--files", str(folder), "--vocab-size", "300", "--json")
    assert created.returncode == 0, created.stderr
    manifest = json.loads(created.stdout)
    assert manifest["documents"] == 400 + 200, "the folder's text and JSONL files, read as the service reads them"
    assert all(f.startswith(str(tmp_path / "service" / "uploads")) for f in manifest["files"]), manifest["files"]
    samples = asyncio.run(connected(nats_server, lambda nc: client.sample_text(
        nc, SUBJECTS, USER, SampleRequest(dataset="remote", split="val", n=2, context=32), timeout=30)))
    assert len(samples) == 2

    stdlib = sorted(Path(json.__file__).parent.parent.glob("*.py"))[:3]  # the stdlib is a root of every service
    sent = asyncio.run(connected(nats_server, lambda nc: send_files(nc, SUBJECTS, USER, [str(p) for p in stdlib], progress=False)))
    assert sent.files == [str(p.resolve()) for p in stdlib] and sent.uploads == [] and sent.uploaded_bytes == 0

    missing = cli("create", "nothing", "--files", str(tmp_path / "nope.txt"))
    assert missing.returncode == 2 and "data not found" in missing.stderr and "Traceback" not in missing.stderr
