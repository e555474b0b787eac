"""Security stories of uploads and datasets against the real server (issue #27, items 7, 8 and 11): each
tries what a user with a valid credential could once do to another's data, and asserts the refusal,
or that the result is unchanged.

One nats-server and one dataset service serve the service stories; alice and bob are users made after
the service started, so the service reads their uploads only because the server's configuration was
recomputed from the members (as `computeall up` does at every change). The last story trains.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import nats.errors
import numpy as np
import pytest

from computeall.cli.client import connect
from computeall.cli.data_upload import send_files
from computeall.cli.errors import UserError
from computeall.cli.follow import start_session
from computeall.cli.nats_server import EmbeddedNats
from computeall.network import load_network
from computeall.protocol import dataset_client as client, wire
from computeall.protocol.batch_grants import grants_bucket
from computeall.protocol.config import DataConfig
from computeall.protocol.dataset_api import (
    BatchRequest, CreateDataset, SampleRequest, pnode_batch_subject, progress_subject, user_subject,
)
from computeall.protocol.eventlog import EventLog
from computeall.protocol.events import EventEnvelope
from computeall.protocol.object_store import dataset_bucket, uploads_bucket
from computeall.protocol.subjects import Subjects

from .cluster import running_cluster, stdlib_corpus
from .identities import connect_as
from .sessions import config, rejection, run_to_end, state
from .test_dataset_service import DatasetProcess
from .test_security_stories import connected
from .test_training_run import NETWORK

S = Subjects("ca")
SECRET = "alice's secret: hunter2"
pytestmark = pytest.mark.timeout(600)


class Service:
    def __init__(self, server: EmbeddedNats, process: DatasetProcess, shared: Path, outside: Path) -> None:
        self.server = server
        self.process = process
        self.shared = shared  # a data root of the service
        self.outside = outside  # nobody's root: files here are uploaded

    @property
    def data_dir(self) -> Path:
        return self.process.data_dir

    async def ask(self, user: str, fn, *args, timeout: float = 60.0):
        """`dataset_client.fn(nc, subjects, user, *args)`, connected as `user`."""
        nc = await connect_as(self.server, "user", user)
        try:
            return await fn(nc, S, user, *args, timeout=timeout)
        finally:
            await nc.close()

    async def raw(self, user: str, verb: str, request: dict) -> dict:
        """A request as any client could send it, unchecked; the service's reply."""
        nc = await connect_as(self.server, "user", user)
        try:
            reply = (await nc.request(user_subject(S, user, verb), json.dumps(request).encode(), timeout=30)).data
        finally:
            await nc.close()
        return {"ok": True, "batch": len(reply)} if reply.startswith(wire.MAGIC) else json.loads(reply)


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    root = tmp_path_factory.mktemp("datasets")
    shared, outside = root / "shared", root / "outside"
    shared.mkdir()
    outside.mkdir()
    with EmbeddedNats(root / "nats") as server:
        process = DatasetProcess(server, root / "service", roots=[shared]).start()
        for user in ("alice", "bob"):  # members made after the service started
            server.credential("user", user)
        try:
            yield Service(server, process, shared, outside)
        finally:
            process.stop()


def corpus(path: Path, line: str, documents: int = 300) -> Path:
    path.write_text("\n\n".join(f"{line} (document {i}) " + "the quick brown fox jumps " * (i % 5 + 1)
                                for i in range(documents)))
    return path


async def send(nc, subjects, user, paths: list[str], timeout: float):
    return await send_files(nc, subjects, user, paths, progress=False, wait_s=timeout)


def batch(reply) -> np.ndarray:
    dtype, shape, data = reply
    return np.frombuffer(bytes(data), dtype=np.dtype(dtype).newbyteorder("<")).reshape(shape)


async def user_batch(nc, subjects, user, request: BatchRequest, timeout: float):
    return await client.fetch_batch(nc, user_subject(subjects, user, "batch"), request, timeout)


def test_another_users_uploads_cannot_be_listed_read_replaced_or_purged(service: Service):
    secret = corpus(service.outside / "alice-notes.txt", SECRET)
    mine = corpus(service.outside / "bob-notes.txt", "bob's own words")
    alice_bucket = uploads_bucket(S, "alice")
    stream = f"OBJ_{alice_bucket}"

    async def story():
        sent = await service.ask("alice", send, [str(secret)])
        assert sent.files == [] and [u.name for u in sent.uploads] == ["alice-notes.txt"], "outside the roots: uploaded"
        uploaded = sent.uploads[0]
        ours = await service.ask("bob", send, [str(mine)])

        nc, refusals = await connected(service.server.credential("user", "bob"))
        try:
            js = nc.jetstream(timeout=2)
            with pytest.raises(nats.errors.TimeoutError):  # list or open her bucket
                await js.object_store(alice_bucket)
            await refusals.saw("permissions violation for publish", f"$JS.API.STREAM.INFO.{stream}")
            await nc.publish(f"$JS.API.DIRECT.GET.{stream}", json.dumps({"last_by_subj": f"$O.{alice_bucket}.M.>"}).encode())
            await refusals.saw("permissions violation for publish", f"$JS.API.DIRECT.GET.{stream}")  # read
            await nc.publish(f"$JS.API.CONSUMER.CREATE.{stream}", b"{}")
            await refusals.saw("permissions violation for publish", f"$JS.API.CONSUMER.CREATE.{stream}")
            await nc.subscribe(f"$O.{alice_bucket}.>")
            await refusals.saw("permissions violation for subscription", f"$O.{alice_bucket}.>")
            await nc.publish(f"$O.{alice_bucket}.M.ZmlsZXM", b"{}")  # replace an object
            await refusals.saw("permissions violation for publish", f"$O.{alice_bucket}.M.ZmlsZXM")
            with pytest.raises(nats.errors.TimeoutError):
                await js.purge_stream(stream)
            await refusals.saw("permissions violation for publish", f"$JS.API.STREAM.PURGE.{stream}")
            with pytest.raises(nats.errors.TimeoutError):  # nor set up a stream that captures her subjects
                await js.add_stream(name="OBJ_ca-uploads-bob2", subjects=[f"$O.{alice_bucket}.>"])
            await refusals.saw("permissions violation for publish", "$JS.API.STREAM.CREATE.OBJ_ca-uploads-bob2")
            await js.purge_stream(f"OBJ_{uploads_bucket(S, 'bob')}")  # his own, he may
        finally:
            await nc.close()

        # naming her upload (its digest is no secret: a manifest shows it) gets him nothing of hers
        with pytest.raises(client.DatasetError, match="alice-notes.txt .* is not in the uploads bucket"):
            await service.ask("bob", client.create_dataset, CreateDataset(name="stolen", uploads=[uploaded], vocab_size=300))
        with pytest.raises(client.DatasetError, match="outside the dataset service's data roots"):
            cached = service.data_dir / "uploads" / "alice"
            await service.ask("bob", client.create_dataset, CreateDataset(name="stolen", files=[str(cached)], vocab_size=300))
        made = await service.ask("alice", client.create_dataset, CreateDataset(name="notes", uploads=[uploaded], vocab_size=300))
        texts = await service.ask("alice", client.sample_text, SampleRequest(dataset="notes", n=4, context=64))
        return ours, made, texts

    ours, made, texts = asyncio.run(story())
    assert ours.uploads and made["owner"] == "alice", "bob's purge of his own bucket left hers whole"
    assert any("hunter2" in t for t in texts), "her own dataset reads her file"


def test_another_users_dataset_is_refused_until_its_owner_makes_it_public_then_read_only(service: Service):
    text = corpus(service.shared / "private.txt", "alice's private corpus")
    request = CreateDataset(name="alices", files=[str(text)], vocab_size=300)
    window = BatchRequest(dataset="alices", step=2, batch=4, context=16)
    hidden = "no dataset named 'alices' is yours or public"

    async def bob_reads() -> dict:
        got = await service.ask("bob", client.get_dataset, "alices")
        samples = await service.ask("bob", client.sample_text, SampleRequest(dataset="alices", n=2, context=16))
        tokens = batch(await service.ask("bob", user_batch, window))
        encoded = await service.ask("bob", client.encode_prompts, "alices", ["the quick"])
        decoded = await service.ask("bob", client.decode_tokens, "alices", encoded.tokens)
        return {"get": got, "samples": samples, "batch": tokens, "decoded": decoded}

    async def bob_is_refused() -> list[str]:
        reasons = []
        for attempt in (lambda: service.ask("bob", client.get_dataset, "alices"),
                        lambda: service.ask("bob", client.sample_text, SampleRequest(dataset="alices", n=2, context=16)),
                        lambda: service.ask("bob", user_batch, window),
                        lambda: service.ask("bob", client.encode_prompts, "alices", ["x"]),
                        lambda: service.ask("bob", client.decode_tokens, "alices", [[1, 2]]),
                        lambda: service.ask("bob", client.share_dataset, "alices", True)):
            with pytest.raises(client.DatasetError) as info:
                await attempt()
            reasons.append(str(info.value))
        return reasons

    async def story():
        made = await service.ask("alice", client.create_dataset, request)
        theirs = batch(await service.ask("alice", user_batch, window))
        refused = await bob_is_refused()
        listed = [d["name"] for d in await service.ask("bob", client.list_datasets)]
        with pytest.raises(client.DatasetError, match="--tokenizer-from 'alices': no such dataset of yours or public"):
            await service.ask("bob", client.create_dataset, CreateDataset(name="copy", files=[str(text)], tokenizer_from="alices"))
        with pytest.raises(client.DatasetError, match="dataset 'alices' already exists"):  # not replaced
            await service.ask("bob", client.create_dataset, request.model_copy(update={"if_exists": "reuse"}))
        nc, refusals = await connected(service.server.credential("user", "bob"))
        try:
            await nc.subscribe(progress_subject(S, "alice", "alices"))  # not even her progress
            await refusals.saw("permissions violation for subscription", progress_subject(S, "alice", "alices"))
        finally:
            await nc.close()

        shared = await service.ask("alice", client.share_dataset, "alices", True)
        read = await bob_reads()
        public_list = [d["name"] for d in await service.ask("bob", client.list_datasets)]
        with pytest.raises(client.DatasetError, match="dataset 'alices' is alice's: only its owner may share it"):
            await service.ask("bob", client.share_dataset, "alices", False)
        with pytest.raises(client.DatasetError, match="dataset 'alices' already exists; choose another name"):
            await service.ask("bob", client.create_dataset, request)
        reused = await service.ask("bob", client.create_dataset, request.model_copy(update={"if_exists": "reuse"}))

        await service.ask("alice", client.share_dataset, "alices", False)
        refused_again = await bob_is_refused()
        return made, theirs, refused, listed, shared, read, public_list, reused, refused_again

    made, theirs, refused, listed, shared, read, public_list, reused, refused_again = asyncio.run(story())
    assert made["owner"] == "alice" and not made["public"]
    assert all(hidden in reason for reason in refused + refused_again), refused + refused_again
    assert "alices" not in listed and "alices" in public_list
    assert shared["public"] and read["get"]["owner"] == "alice" and read["get"]["recipe_digest"] == made["recipe_digest"]
    assert np.array_equal(read["batch"], theirs), "a public dataset reads the same bits for everyone"
    assert len(read["samples"]) == 2 and read["decoded"] == ["the quick"]
    assert reused["owner"] == "alice" and reused["recipe_digest"] == made["recipe_digest"], "reuse reads it, unchanged"

    async def recorded() -> list[tuple[str, str, bool]]:
        nc = await connect_as(service.server, "monitor")  # the monitor reads the whole log
        try:
            records = await EventLog(nc.jetstream(), S).read(S.dataset_evt("alices", "DatasetShared"))
        finally:
            await nc.close()
        return [(e.actor, e.payload.owner, e.payload.public) for e in map(EventEnvelope.model_validate_json, (r.data for r in records))]

    assert asyncio.run(recorded()) == [("alice", "alice", True), ("alice", "alice", False)]


def test_paths_and_names_that_leave_the_root_are_refused_on_every_verb_and_the_service_keeps_serving(service: Service):
    text = corpus(service.shared / "plain.txt", "plain text")
    outside = service.outside / "elsewhere"
    datasets = service.data_dir / "datasets"
    bad_names = ["../alices", "/etc/passwd", "a/b", "..", "x.y", "plain/../../../etc"]

    def requests(bad: str) -> list[tuple[str, dict]]:
        return [
            ("get", {"name": bad}),
            ("share", {"name": bad, "public": True}),
            ("batch", {"dataset": bad, "step": 0, "batch": 1, "context": 8}),
            ("batch", {"dataset": "plain", "split": bad, "step": 0, "batch": 1, "context": 8}),
            ("sample", {"dataset": bad}),
            ("encode", {"dataset": bad, "texts": ["x"]}),
            ("decode", {"dataset": bad, "tokens": [[1]]}),
            ("create", {"name": bad, "files": [str(text)], "vocab_size": 300}),
            ("create", {"name": "fine", "files": [str(text)], "tokenizer_from": bad}),
        ]

    async def story():
        made = await service.ask("alice", client.create_dataset, CreateDataset(name="plain", files=[str(text)], vocab_size=300))
        replies = {(verb, bad): await service.raw("alice", verb, body) for bad in bad_names for verb, body in requests(bad)}

        # a dataset folder that is a link out of the service's folder
        shutil.copytree(datasets / "plain", outside)
        manifest = json.loads((outside / "manifest.json").read_text())
        (outside / "manifest.json").write_text(json.dumps({**manifest, "name": "linked"}))
        (datasets / "linked").symlink_to(outside)
        linked = await service.raw("alice", "get", {"name": "linked"})

        # manifests whose files escape: here on disk, and forged in the bucket
        (datasets / "escape").mkdir()
        shards = manifest["splits"]["train"]["shards"]
        forged = {**manifest, "name": "escape",
                  "splits": {**manifest["splits"], "train": {**manifest["splits"]["train"],
                                                            "shards": [{**shards[0], "file": "../../../../etc/passwd"}]}}}
        (datasets / "escape" / "manifest.json").write_text(json.dumps(forged))
        escaped = await service.raw("alice", "batch", {"dataset": "escape", "step": 0, "batch": 1, "context": 8})
        nc = await connect_as(service.server, "superuser")  # someone who tampered with the server's storage
        try:
            store = await nc.jetstream().object_store(dataset_bucket(S))
            await store.put("escape2/manifest.json", json.dumps({**forged, "name": "escape2"}).encode())
        finally:
            await nc.close()
        escaped_bucket = await service.raw("alice", "get", {"name": "escape2"})

        # a shard that is a link out of the service's folder
        shutil.copytree(datasets / "plain", datasets / "linkshard")
        (datasets / "linkshard" / "manifest.json").write_text(json.dumps({**manifest, "name": "linkshard"}))
        shard = datasets / "linkshard" / shards[0]["file"]
        shard.unlink()
        shard.symlink_to("/etc/passwd")
        link_shard = await service.raw("alice", "batch", {"dataset": "linkshard", "step": 0, "batch": 1, "context": 8})

        # an upload named as the service's own files
        named = service.outside / "upload" / "manifest.json"
        named.parent.mkdir()
        corpus(named, "json lines")
        with pytest.raises(UserError, match="manifest.json is the name of the dataset service's own files; upload it under another name"):
            await service.ask("alice", send, [str(named)])
        upload_named = await service.raw("alice", "create", {"name": "up", "vocab_size": 300, "uploads": [
            {"name": "manifest.json", "sha256": "0" * 64, "size": 10}]})

        started = time.monotonic()
        again = await service.ask("alice", client.get_dataset, "plain")
        return made, replies, linked, escaped, escaped_bucket, link_shard, upload_named, again, time.monotonic() - started

    made, replies, linked, escaped, escaped_bucket, link_shard, upload_named, again, answered_s = asyncio.run(story())
    for (verb, bad), reply in replies.items():
        assert reply["ok"] is False and "is not valid: use 1 to" in reply["error"], (verb, bad, reply)
        assert f"invalid {verb} request" in reply["error"], (verb, bad, reply)
    assert not linked["ok"] and "'linked' leads out of the dataset service's folder datasets" in linked["error"], linked
    assert not escaped["ok"] and "manifest here is not valid (splits.train.shards.0.file" in escaped["error"], escaped
    assert not escaped_bucket["ok"] and "manifest in bucket ca-datasets is not valid" in escaped_bucket["error"], escaped_bucket
    assert not link_shard["ok"] and "'shards/train-00000.bin' leads out of" in link_shard["error"], link_shard
    assert not upload_named["ok"] and "manifest.json is the name of the dataset service's own files" in upload_named["error"]
    for reply in (linked, escaped, escaped_bucket, link_shard):
        assert "root:" not in reply["error"], "nothing of what lies outside is told"
    assert again == made and answered_s < 1.0 and service.process.process.poll() is None, "still serving, never restarted"


def test_the_cli_refuses_an_oversized_file_before_reading_or_hashing_it(service: Service):
    huge = service.outside / "huge.txt"
    subprocess.run(["truncate", "-s", "64G", str(huge)], check=True)  # sparse: nothing to read but zeros

    async def in_process() -> float:
        started = time.monotonic()
        with pytest.raises(UserError, match=r"huge.txt: 68,719,476,736 bytes, more than the 4,294,967,296 one file"):
            await service.ask("alice", send, [str(huge)])
        return time.monotonic() - started

    assert asyncio.run(in_process()) < 1.0
    started = time.monotonic()
    cli = subprocess.run([sys.executable, "-m", "computeall.cli.main", "dataset", "create", "huge", "--files", str(huge),
                          "--credential", str(service.server.credential_file("user", "alice"))],
                         capture_output=True, text=True, timeout=60)
    assert cli.returncode == 2 and "more than the 4,294,967,296 one file" in cli.stderr and "Traceback" not in cli.stderr
    assert time.monotonic() - started < 15, "refused at once (hashing 64 GiB takes minutes), the CLI's start included"


async def test_training_on_another_users_dataset_is_refused_until_it_is_public_and_pnodes_read_only_their_grants(tmp_path):
    vocab = load_network(NETWORK.read_text()).vocab_size
    async with running_cluster(tmp_path / "cluster", pnodes=1) as (alice, supervisor):  # the local user is alice here
        await client.create_dataset(alice.nc, alice.subjects, alice.user,
                                    CreateDataset(name="alices", files=stdlib_corpus(), vocab_size=vocab), timeout=600)
        on_hers = config(steps=2, checkpoint_every=0, min_pnodes=1).model_copy(update={"data": DataConfig(dataset="alices")})
        async with connect(supervisor.credentials.credential("user", "bob")) as bob:
            sid, command_id = await start_session(bob, on_hers)
            refused = await rejection(bob, sid, command_id)  # at once: the create is refused, nothing recorded
            assert (await state(bob, sid)).status == "new"
            await client.share_dataset(alice.nc, alice.subjects, alice.user, "alices", True, timeout=30)
            trained = await run_to_end(bob, on_hers)
            with pytest.raises(client.DatasetError, match="only its owner may share it"):
                await client.share_dataset(bob.nc, bob.subjects, bob.user, "alices", False, timeout=30)

        # the session is over: its PNode's grant went with it; another PNode never had one
        request = BatchRequest(dataset="alices", session_id=trained, step=0, batch=1, context=8)
        refusals = {}
        for pnode in ("pnode-0", "pnode-rogue"):
            nc, seen = await connected(supervisor.credentials.credential("pnode", pnode))
            try:
                with pytest.raises(client.DatasetError) as info:
                    await client.fetch_batch(nc, pnode_batch_subject(alice.subjects, pnode), request, timeout=30)
                refusals[pnode] = str(info.value)
                forged = f"$KV.{grants_bucket(alice.subjects)}.{trained}"
                await nc.publish(forged, json.dumps({"dataset": "alices", "pnodes": [pnode]}).encode())
                await seen.saw("permissions violation for publish", forged)
                await nc.publish(user_subject(alice.subjects, "local", "get"), b"{}")  # nor ask as a user
                await seen.saw("permissions violation for publish", user_subject(alice.subjects, "local", "get"))
            finally:
                await nc.close()

    assert "no dataset named 'alices' is yours or public" in refused, refused
    for pnode, reason in refusals.items():
        assert f"PNode {pnode} may not read dataset 'alices' for session {trained}" in reason, reason
