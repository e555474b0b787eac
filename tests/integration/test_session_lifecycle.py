"""A session's life at its two ends, against the real server and services: `session create` is refused at
once when its data cannot be prepared (a dataset that is missing or another user's, uploads that are not
there), and `session delete` takes a session out of every list while the log keeps its events, stopping
a running one first and freeing its owner's running slot."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from computeall.cli.client import connect
from computeall.cli.data_upload import send_files
from computeall.cli.follow import start_session
from computeall.cli.session_view import session_events
from computeall.protocol.commands import DeleteSession, StartSession
from computeall.protocol.config import DataConfig
from computeall.protocol.dataset_api import CreateDataset
from computeall.protocol.dataset_client import create_dataset
from computeall.protocol.events import (
    CommandRejected, SessionCreated, SessionDeleted, SessionStopped, StepCompleted, StopRequested,
)
from computeall.protocol.fair_share import FairShareLimits
from computeall.protocol.object_store import uploads_bucket
from computeall.protocol.uploads import UploadManifest, file_object, part_object

from .cluster import running_cluster, stdlib_corpus
from .sessions import command, config, rejection, state, wait_for
from .test_training_run import NETWORK

pytestmark = pytest.mark.timeout(600)


def cli(supervisor, user: str, *argv: str, timeout: float = 120) -> subprocess.CompletedProcess:
    credential = supervisor.credentials.credential_file("user", user)
    return subprocess.run([sys.executable, "-m", "computeall.cli.main", *argv, "--credential", str(credential)],
                          capture_output=True, text=True, timeout=timeout)


def on(data: DataConfig):
    return config(steps=4, checkpoint_every=0, min_pnodes=1).model_copy(update={"data": data})


async def test_a_create_whose_data_cannot_be_prepared_is_refused_at_once_with_the_reason(tmp_path):
    private = tmp_path / "notes.txt"
    private.write_text("alice's notes, uploaded\n\n" * 200)
    async with running_cluster(tmp_path / "cluster", pnodes=0) as (alice, supervisor):
        vocab = 512
        await create_dataset(alice.nc, alice.subjects, alice.user,
                             CreateDataset(name="alices", files=stdlib_corpus(50_000), vocab_size=vocab), timeout=600)
        sent = await send_files(alice.nc, alice.subjects, alice.user, [str(private)], progress=False)
        (uploaded,) = sent.uploads
        store = await alice.nc.jetstream().object_store(uploads_bucket(alice.subjects, alice.user))
        record = UploadManifest.model_validate_json((await store.get(file_object(uploaded.sha256))).data)

        async with connect(supervisor.credentials.credential("user", "bob")) as bob:
            refusals = {}
            for case, client, data in [
                ("another user's dataset", bob, DataConfig(dataset="alices")),
                ("no such dataset", alice, DataConfig(dataset="nosuch")),
                ("no such split", alice, DataConfig(dataset="alices", split="nosuch")),
                ("never uploaded", alice, DataConfig(uploads=[uploaded.model_copy(update={"sha256": "0" * 64})])),
                ("nothing uploaded at all", bob, DataConfig(uploads=[uploaded])),
            ]:
                sid, command_id = await start_session(client, on(data))
                refusals[case] = await rejection(client, sid, command_id)
                assert (await state(client, sid)).status == "new", f"{case}: nothing recorded"

            # an upload that lost a part since is refused too; complete, it is taken
            complete, _ = await start_session(alice, on(DataConfig(uploads=[uploaded])), start=False)
            created = await wait_for(alice, complete, lambda s: s.status == "created", timeout=60)
            await store.delete(part_object(record.parts[0]))
            sid, command_id = await start_session(alice, on(DataConfig(uploads=[uploaded])), start=False)
            refusals["a part missing"] = await rejection(alice, sid, command_id)

        # what a user meets: the CLI says why and fails, at once, instead of printing a session id
        started = time.monotonic()
        refused_cli = cli(supervisor, "bob", "session", "create", "--network", str(NETWORK), "--dataset", "alices")
        took = time.monotonic() - started

    assert "no dataset named 'alices' is yours or public" in refusals["another user's dataset"]
    assert "no dataset named 'nosuch' is yours or public" in refusals["no such dataset"]
    assert "dataset 'alices' has no split 'nosuch'; it has train, val" in refusals["no such split"]
    assert f"{uploaded.name} (sha256 000000000000...) is not in the uploads bucket" in refusals["never uploaded"]
    assert "you have uploaded nothing yet" in refusals["nothing uploaded at all"]
    assert f"part 1 of {uploaded.name} is missing from the uploads bucket" in refusals["a part missing"]
    assert all(r.startswith("data: ") for r in refusals.values()), refusals
    assert created.config.data.uploads == [uploaded]
    assert refused_cli.returncode != 0, refused_cli.stdout
    assert "rejected: data: no dataset named 'alices' is yours or public" in refused_cli.stderr, refused_cli.stderr
    assert "created" not in refused_cli.stdout and "Traceback" not in refused_cli.stderr
    assert took < 30, f"the CLI answered after {took:.0f}s"


async def test_delete_hides_a_session_stops_a_running_one_first_and_frees_its_slot(tmp_path):
    one_at_a_time = FairShareLimits(max_running_sessions_per_user=1)
    async with running_cluster(tmp_path, pnodes=1, limits=one_at_a_time) as (client, supervisor):
        waiting, _ = await start_session(client, config(steps=3, min_pnodes=1), start=False)
        await wait_for(client, waiting, lambda s: s.status == "created")
        running, _ = await start_session(client, config(steps=100_000, checkpoint_every=0, min_pnodes=1))
        await wait_for(client, running, lambda s: s.next_step >= 2, timeout=180)
        await command(client, waiting, StartSession())  # the owner's one slot is taken: it queues
        await wait_for(client, waiting, lambda s: s.status == "queued")

        # bob may not delete the local user's session (the refusal is in its log, which only its owner reads)
        async with connect(supervisor.credentials.credential("user", "bob")) as bob:
            forged = await command(bob, running, DeleteSession())
        refused = await rejection(client, running, forged.id)

        deleted = cli(supervisor, "local", "session", "delete", running, "--json")
        assert deleted.returncode == 0, deleted.stderr
        gone = await wait_for(client, running, lambda s: s.status == "deleted", timeout=180)
        # its slot is free: the queued session starts and runs to its end
        await wait_for(client, waiting, lambda s: s.status == "completed", timeout=240)
        after = await rejection(client, running, (await command(client, running, StartSession())).id)

        listed = cli(supervisor, "local", "session", "list", "--json")
        shown = cli(supervisor, "local", "session", "show", running, "--json")
        events = [e.payload for _, e in await session_events(client, running)]

    assert refused == f"session {running} belongs to another user"
    assert json.loads(deleted.stdout) == {"session_id": running, "event": "DeleteRequested"}
    recorded = [type(p) for p in events if not isinstance(p, CommandRejected)]
    assert recorded.index(StopRequested) < recorded.index(SessionStopped) < recorded.index(SessionDeleted)
    assert recorded[-1] is SessionDeleted and recorded[0] is SessionCreated, "the log keeps every event"
    assert recorded.count(StepCompleted) == gone.next_step >= 2
    assert after == "cannot start a session that is deleted"
    assert running not in {row["session_id"] for row in json.loads(listed.stdout)}
    assert waiting in {row["session_id"] for row in json.loads(listed.stdout)}
    assert json.loads(shown.stdout)["status"] == "deleted", "shown by id: what happened to it"
