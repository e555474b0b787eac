"""A remote site's leaf server linked to the hub, both real nats-servers on this machine: what crosses
the link is exactly what the site's PNodes may do, JetStream is the hub's, each credential works
only as what it is, and revoking takes effect across the link."""

from __future__ import annotations

import asyncio

import pytest

from computeall.cli.leaf_site import LeafServer
from computeall.cli.nats_server import EmbeddedNats, free_port
from computeall.cli.security.invitations import invite, revoke
from computeall.protocol import bus
from computeall.protocol.credentials import Credential
from computeall.protocol.invites import Invite
from computeall.protocol.membership_api import SessionHosts
from computeall.protocol.object_store import checkpoint_bucket
from computeall.protocol.subjects import Subjects

from .waiting import wait_until_async

S = Subjects()


@pytest.fixture
def hub(tmp_path):
    with EmbeddedNats(tmp_path / "hub", listen=f"127.0.0.1:{free_port()}", leaf_listen=f"127.0.0.1:{free_port()}") as server:
        server.credential("orchestrator")  # before the site links: the reloads later in the test are the ones it means
        yield server


def site_invite(hub: EmbeddedNats, pnodes: int = 2) -> Invite:
    made = invite(hub.security, "leaf", hub.public_leaf_urls(), hub.tls.trust(), name="site", site_pnodes=pnodes)
    hub.apply_members()
    return made


async def crosses(sender, subject: str, receiver, within_s: float = 10.0) -> bool:
    """Whether a message `sender` publishes on `subject` reaches `receiver`'s subscription (interest
    takes a moment to propagate over the link, so it is published until it arrives or time is up)."""
    got = asyncio.Event()

    async def arrived(msg) -> None:
        got.set()

    sub = await receiver.subscribe(subject, cb=arrived)
    await receiver.flush()
    try:
        await wait_until_async(lambda: _publish_and_check(sender, subject, got), within_s, f"{subject} across the link", 0.2)
        return True
    except AssertionError:
        return False
    finally:
        await sub.unsubscribe()


async def _publish_and_check(sender, subject: str, got: asyncio.Event) -> bool:
    await sender.publish(subject, b"x")
    await sender.flush()
    await asyncio.sleep(0.05)
    return got.is_set()


async def test_only_the_sites_pnodes_cross_and_jetstream_is_the_hubs(hub, tmp_path):
    made = site_invite(hub)
    with hub.security.grants.edit() as grants:  # as the authority records a placement on site-0
        grants.host(SessionHosts(session_id="s1", pnodes=["site-0"], as_of=1))
    hub.apply_members()
    with LeafServer(tmp_path / "site", made) as site:
        site.wait_linked()
        assert "jetstream" not in site.config(), "the event log and buckets live on the hub only"
        orchestrator = await bus.connect(hub.credential("orchestrator"), name="orchestrator")
        p0 = await bus.connect(site.credential("pnode", "site-0"), name="pnode-site-0")
        p1 = await bus.connect(site.credential("pnode", "site-1"), name="pnode-site-1")
        try:
            clients = [c for c in site.monitoring("connz")["connections"] if c["kind"] == "Client"]
            assert {c["name"] for c in clients} == {"pnode-site-0", "pnode-site-1"}
            assert await crosses(p0, S.heartbeat("site-0"), orchestrator), "site to hub"
            assert await crosses(orchestrator, S.pnode_ctl("site-1"), p1), "hub to site"

            # a session's checkpoint bucket: made by the orchestrator on the hub, used by its site PNode across the link
            await orchestrator.jetstream().create_object_store(checkpoint_bucket(S, "s1"))
            store = await p0.jetstream().object_store(checkpoint_bucket(S, "s1"))
            await store.put("weights", b"w" * 300_000)
            assert (await store.get("weights")).data == b"w" * 300_000

            # one PNode of the site revoked on the hub: its messages no longer cross, the others' still do
            member = next(m for m in hub.security.members.read().site("site") if m.name == "site-1")
            with hub.security.members.edit() as members:
                members.find(member.id).revoked = 1.0
            hub.apply_members()
            assert not await crosses(p1, S.heartbeat("site-1"), orchestrator, within_s=3.0)
            assert await crosses(p0, S.heartbeat("site-0"), orchestrator)
            assert await crosses(orchestrator, S.pnode_ctl("site-0"), p0)

            # the whole site revoked: the link is closed and refused
            revoke(hub.security, made.id)
            hub.apply_members()
            assert not await crosses(p0, S.heartbeat("site-0"), orchestrator, within_s=3.0)
            assert not site.monitoring("leafz").get("leafs")
        finally:
            for nc in (orchestrator, p0, p1):
                await nc.close()


async def test_a_pnode_credential_is_no_leaf_and_a_leaf_credential_no_client(hub, tmp_path):
    made = site_invite(hub, pnodes=1)
    far = invite(hub.security, "pnode", hub.public_urls(), hub.tls.trust(), name="far")
    hub.apply_members()
    as_leaf = made.model_copy(update={"nkey_seed": far.nkey_seed})
    with LeafServer(tmp_path / "site", as_leaf) as site, pytest.raises(RuntimeError, match="could not join the hub"):
        site.wait_linked(timeout_s=5)
    with pytest.raises(bus.BusConnectError, match="Authorization Violation"):
        await bus.connect(Credential(role="leaf", name="site", servers=[hub.url], nkey_seed=made.nkey_seed, tls=made.tls),
                          name="leaf-as-client", allow_reconnect=False)
    as_itself = await bus.connect(far.credential().at(hub.url), name="far", allow_reconnect=False)
    assert as_itself.is_connected, "the PNode's credential works as what it is"
    await as_itself.close()


async def test_a_leaf_without_credentials_is_refused(hub, tmp_path):
    made = site_invite(hub, pnodes=1)

    class Anonymous(LeafServer):
        def config(self, users=None) -> str:  # the same leaf server, its remote without the leaf's nkey
            return super().config(users).replace(f'"nkey": "{made.nkey_seed}",', "")

    with Anonymous(tmp_path / "site", made) as site:
        assert made.nkey_seed not in site.config_file.read_text()
        with pytest.raises(RuntimeError, match="could not join the hub"):
            site.wait_linked(timeout_s=5)
    with pytest.raises(bus.BusConnectError, match="Authorization Violation"):  # nor does a client without one
        await bus.connect(Credential(role="pnode", name="anyone", servers=[hub.url], tls=made.tls), name="anyone",
                          allow_reconnect=False)
