"""Security stories against the real server: each tries what issue #13 found anyone could do, and
asserts the refusal. One `computeall up` serves them all; alice and bob are made with `user create`.

(The dataset service asked for a path outside its roots is the dataset service's own story.)"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import nats
import nats.errors
import pytest

from computeall.cli.client import connect
from computeall.cli.errors import UserError
from computeall.cli.follow import follow_session, start_session
from computeall.cli.identity import deployment_security
from computeall.cli.security.deployment import Security
from computeall.cli.session_view import session_events
from computeall.protocol import bus, membership_api
from computeall.protocol.commands import CommandEnvelope, StartSession
from computeall.protocol.credentials import Credential, nkey_public
from computeall.protocol.events import CheckpointCommitted, CommandRejected
from computeall.protocol.session_reads import ReadObject
from computeall.protocol.subjects import Subjects

from .sessions import config
from .waiting import wait_until, wait_until_async

COMPUTEALL = str(Path(sys.executable).parent / "computeall")
S = Subjects()
pytestmark = pytest.mark.timeout(300)


@dataclass
class Deployment:
    data_dir: Path
    security: Security
    keys: dict[str, str]  # user -> API key
    session: str  # alice's trained session

    def user(self, name: str) -> Credential:
        local = self.security.local("user", "local")
        return Credential.for_api_key(self.keys[name], local.servers)

    def identity(self, role, name) -> Credential:
        """A credential of this deployment's, applied by the running server before it is returned."""
        credential = self.security.issue(role, name, self.security.local("user", "local").servers)
        config = self.data_dir / "nats" / "nats.conf"
        wait_until(lambda: credential_key(credential) in config.read_text(), 15, "the server taking a new member")
        return credential


def credential_key(credential: Credential) -> str:
    return nkey_public(credential.nkey_seed)


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("stories") / "up"
    up = subprocess.Popen([COMPUTEALL, "up", "--pnodes", "1", "--data-dir", str(data_dir)],
                          stdout=open(data_dir.parent / "up.log", "wb"), stderr=subprocess.STDOUT)
    try:
        wait_until((data_dir / "cluster.json").exists, 90, "computeall up writing cluster.json", interval=0.2)
        keys = {name: make_user(data_dir, name) for name in ("alice", "bob")}
        security = deployment_security(str(data_dir))
        partial = Deployment(data_dir, security, keys, "")
        sid = asyncio.run(train(partial.user("alice")))
        yield Deployment(data_dir, security, keys, sid)
    finally:
        up.send_signal(signal.SIGINT)
        up.wait(60)


def make_user(data_dir: Path, name: str) -> str:
    def made():
        result = subprocess.run([COMPUTEALL, "user", "create", name, "--json", "--data-dir", str(data_dir)],
                                capture_output=True, text=True)
        return result.returncode == 0 and json.loads(result.stdout)["api_key"]

    return wait_until(made, 60, f"the monitor making user {name}", interval=0.5)


async def train(credential: Credential) -> str:
    async with connect(credential) as client:
        cfg = config(steps=2, checkpoint_every=0, min_pnodes=1)
        sid, command_id = await start_session(client, cfg)
        outcome = await asyncio.wait_for(follow_session(client, sid, 2, progress=False, command_id=command_id), 180)
        assert outcome.ok, outcome.message
    return sid


class Refusals:
    """A connection's asynchronous errors: how NATS says a publish or subscribe was not allowed."""

    def __init__(self) -> None:
        self.errors: list[str] = []

    async def record(self, exc: Exception) -> None:  # nats-py's error_cb: a coroutine function
        self.errors.append(str(exc))

    async def saw(self, what: str, subject: str) -> None:
        async def seen() -> bool:  # nats-py lowercases the server's error, subject included
            return any(what in e.lower() and subject.lower() in e.lower() for e in self.errors)

        await wait_until_async(seen, 10, f"a {what} for {subject}")


async def connected(credential: Credential, **options):
    refusals = Refusals()
    nc = await bus.connect(credential, name="story", error_cb=refusals.record, **options)
    return nc, refusals


async def test_an_anonymous_connection_is_refused(deployment):
    url = deployment.security.local("user", "local").servers[0]
    anonymous = Credential(role="user", name="anonymous", servers=[url])  # no key, no signature
    with pytest.raises(bus.BusConnectError, match="Authorization Violation"):
        await bus.connect(anonymous, name="story", allow_reconnect=False, connect_timeout=5)


async def test_a_user_cannot_command_another_users_session(deployment):
    sid = deployment.session
    nc, refusals = await connected(deployment.user("bob"))
    try:
        forged = CommandEnvelope(actor="alice", session_id=sid, payload=StartSession())
        await nc.publish(S.session_cmd(sid, "alice"), forged.model_dump_json().encode())  # alice's subject
        await refusals.saw("permissions violation for publish", S.session_cmd(sid, "alice"))
        async with connect(deployment.user("bob")) as bob:
            mine = CommandEnvelope(actor="bob", session_id=sid, payload=StartSession())
            await bob.publish_command(mine)  # bob's own subject: recorded, and refused
    finally:
        await nc.close()
    async with connect(deployment.user("alice")) as alice:
        async def refused():
            return next((e.payload for _, e in await session_events(alice, sid)
                         if isinstance(e.payload, CommandRejected) and e.payload.command_id == mine.id), None)

        rejection = await wait_until_async(refused, 30, "the orchestrator refusing bob's command")
    assert "belongs to another user" in rejection.reason


async def test_a_user_sees_nothing_of_another_users_session(deployment):
    sid = deployment.session
    nc, refusals = await connected(deployment.user("bob"))
    try:
        for subject in ("ca.pn.pnode-0.tensor", "ca.tel.>", f"ca.evt.session.{sid}.>", "_INBOX.user.alice.>"):
            await nc.subscribe(subject)
            await refusals.saw("permissions violation for subscription", subject)
    finally:
        await nc.close()
    async with connect(deployment.user("bob")) as bob:
        with pytest.raises(UserError, match=f"user bob has no session {sid}"):
            await bob.session_events(sid)
        assert sid not in await bob.session_ids()
        async with connect(deployment.user("alice")) as alice:
            committed = [e.payload for _, e in await session_events(alice, sid) if isinstance(e.payload, CheckpointCommitted)]
            name = committed[-1].objects[0].object
            assert await alice.read_object(ReadObject(session_id=sid, object=name))  # the owner reads it
        with pytest.raises(UserError, match=f"user bob has no session {sid}"):
            await bob.read_object(ReadObject(session_id=sid, object=name))
    generate = subprocess.run([COMPUTEALL, "generate", sid, "--prompt", "x", "--api-key", deployment.keys["bob"],
                               "--data-dir", str(deployment.data_dir)], capture_output=True, text=True, timeout=120)
    assert generate.returncode == 2 and f"user bob has no session {sid}" in generate.stderr, generate.stderr[-2000:]


async def test_a_pnode_cannot_command_or_append_to_the_log(deployment):
    rogue = deployment.identity("pnode", "pnode-rogue")
    nc, refusals = await connected(rogue)
    try:
        for subject in (S.session_cmd(deployment.session, "alice"), S.session_evt(deployment.session, "SessionCompleted"),
                        S.pnode_evt("pnode-0", "PNodeLeft"), S.heartbeat("pnode-0"), "$JS.API.STREAM.CREATE.CA_LOG"):
            await nc.publish(subject, b"{}")
            await refusals.saw("permissions violation for publish", subject)
    finally:
        await nc.close()


async def test_a_client_cannot_list_or_delete_streams(deployment):
    nc, refusals = await connected(deployment.user("alice"))
    try:
        js = nc.jetstream(timeout=2)
        with pytest.raises(nats.errors.TimeoutError):
            await js.streams_info()
        await refusals.saw("permissions violation for publish", "$JS.API.STREAM.LIST")
        with pytest.raises(nats.errors.TimeoutError):
            await js.delete_stream("CA_LOG")
        await refusals.saw("permissions violation for publish", "$JS.API.STREAM.DELETE.CA_LOG")
    finally:
        await nc.close()
    async with connect(deployment.user("alice")) as alice:
        assert deployment.session in await alice.session_ids(), "the log is still there"


async def test_a_revoked_key_is_cut_off_within_seconds(deployment, tmp_path):
    key = make_user(deployment.data_dir, "carol")
    closed = asyncio.Event()

    async def on_closed():
        closed.set()

    carol = Credential.for_api_key(key, deployment.security.local("user", "local").servers)
    nc, _ = await connected(carol, closed_cb=on_closed, max_reconnect_attempts=3, reconnect_time_wait=0.2)
    monitor = json.loads((deployment.data_dir / "cluster.json").read_text())["monitor"]

    def gql(query: str) -> dict:
        return httpx.post(f"{monitor}/graphql", json={"query": query}, headers={"Authorization": f"Bearer {key}"}, timeout=10).json()

    key_id = gql("{ me { apiKeys { id } } }")["data"]["me"]["apiKeys"][0]["id"]
    start = time.monotonic()
    assert gql(f'mutation {{ revokeApiKey(id: "{key_id}") }}')["data"]["revokeApiKey"] is True
    await asyncio.wait_for(closed.wait(), 10)
    assert time.monotonic() - start < 10
    with pytest.raises(bus.BusConnectError, match="Authorization Violation"):
        await bus.connect(carol, name="again", allow_reconnect=False, max_reconnect_attempts=0, error_cb=Refusals().record)


async def test_a_revoked_or_expired_pnode_is_cut_off(deployment):
    """Revocation as a quarantine does it (`membership_api.revoke_pnode`), and an expiry."""
    for name, cut_off in (("pnode-quarantined", "revoke"), ("pnode-shortlived", "expire")):
        credential = deployment.identity("pnode", name)
        closed = asyncio.Event()

        async def on_closed():
            closed.set()

        nc, _ = await connected(credential, closed_cb=on_closed, max_reconnect_attempts=3, reconnect_time_wait=0.2)
        if cut_off == "revoke":
            orchestrator = await bus.connect(deployment.security.local("orchestrator", "orchestrator"), name="quarantine")
            reply = await membership_api.revoke_pnode(orchestrator, S, name, reason="verification failed")
            await orchestrator.close()
            assert reply.revoked
        else:
            with deployment.security.members.edit() as members:
                next(m for m in members.active() if m.name == name).expires = time.time() + 1
        await asyncio.wait_for(closed.wait(), 15)
        with pytest.raises(bus.BusConnectError, match="Authorization Violation"):
            await bus.connect(credential, name="again", allow_reconnect=False, max_reconnect_attempts=0, error_cb=Refusals().record)


async def test_the_local_users_key_is_only_in_its_file(deployment):
    path = deployment.security.local_api_key_path
    assert path.stat().st_mode & 0o777 == 0o600
    nc, _ = await connected(deployment.security.local("admin", "operator"))  # may ask the monitor anything
    try:
        with pytest.raises(nats.errors.NoRespondersError):
            await nc.request("ca.mon.user.default-key", b"{}", timeout=5)  # no such request any more
    finally:
        await nc.close()
