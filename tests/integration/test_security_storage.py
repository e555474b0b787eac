"""Checkpoints belong to their session, against the real server: a PNode that does not host a session
can neither read, write, replace nor purge its checkpoints, one that hosts it may not delete them
and loses them when the session ends; the session's own PNodes still save, load, restore after a
failover, start from another session's weights and write samples. A checkpoint damaged in the store
is found, discarded, and the session goes on from the newest intact one to the bits of a clean run."""

from __future__ import annotations

import base64

import nats.errors
import pytest
from nats.aio.client import Client as NATS
from nats.js.errors import ServiceUnavailableError

from computeall.cli.follow import start_session
from computeall.cli.leaf_site import LeafServer
from computeall.cli.nats_server import EmbeddedNats, free_port
from computeall.cli.security.invitations import invite
from computeall.cli.session_view import session_events
from computeall.protocol import bus
from computeall.protocol.commands import PauseSession, ResumeSession, StopSession
from computeall.protocol.config import InitFrom
from computeall.protocol.credentials import Credential
from computeall.protocol.membership_api import SessionHosts
from computeall.protocol.subjects import Subjects
from computeall.protocol.events import (
    CheckpointCommitted,
    CheckpointDiscarded,
    InitializedFrom,
    RolledBack,
    SamplesGenerated,
)
from computeall.protocol.object_store import checkpoint_bucket, existing_bucket
from computeall.protocol.session_reads import ReadObject
from computeall.protocol.wire import digest

from .cluster import running_cluster
from .identities import connect_as
from .sessions import command, config, final_digests, losses, run_to_end, wait_for
from .waiting import wait_until_async

pytestmark = pytest.mark.timeout(600)


class Refusals:
    """A connection's asynchronous errors: how NATS says a publish was not allowed."""

    def __init__(self) -> None:
        self.errors: list[str] = []

    async def record(self, exc: Exception) -> None:
        self.errors.append(str(exc))

    async def saw(self, subject: str) -> None:
        async def seen() -> bool:  # nats-py lowercases the server's error, subject included
            return any("permissions violation for publish" in e.lower() and subject.lower() in e.lower() for e in self.errors)

        await wait_until_async(seen, 10, f"a permissions violation for {subject}")


async def connected(credential: Credential, name: str) -> tuple[NATS, Refusals]:
    refusals = Refusals()
    nc = await bus.connect(credential, name=name, error_cb=refusals.record)
    return nc, refusals


def meta_subject(bucket: str, name: str) -> str:
    """Where an object's description lives: publishing there with `Nats-Rollup: sub` replaces the object."""
    return f"$O.{bucket}.M.{base64.urlsafe_b64encode(name.encode()).decode()}"


async def read_refused(nc: NATS, refusals: Refusals, bucket: str) -> None:
    with pytest.raises(nats.errors.TimeoutError):
        await nc.jetstream(timeout=2).object_store(bucket)
    await refusals.saw(f"$JS.API.STREAM.INFO.OBJ_{bucket}")


async def refused_soon(nc: NATS, refusals: Refusals, bucket: str, within_s: float = 20.0) -> None:
    """Until `nc` may no longer read `bucket` (a grant taken away a moment after an event is recorded)."""
    async def refused() -> bool:
        try:
            await nc.jetstream(timeout=1).object_store(bucket)
            return False
        except nats.errors.TimeoutError:
            return True

    await wait_until_async(refused, within_s, f"{bucket} refused")
    await refusals.saw(f"$JS.API.STREAM.INFO.OBJ_{bucket}")


async def test_a_pnode_reaches_only_the_checkpoints_of_the_sessions_it_hosts(tmp_path):
    async with running_cluster(tmp_path, pnodes=2) as (client, supervisor):
        credentials = supervisor.credentials
        # a second connection with a hosting PNode's own credential, made before anything is placed
        host, host_refusals = await connected(credentials.credential("pnode", "pnode-0"), "pnode-0-tap")
        outsider, refusals = await connected(credentials.credential("pnode", "pnode-outsider"), "outsider")
        try:
            sid, _ = await start_session(client, config(steps=5000, checkpoint_every=5, keep_checkpoints=5000, min_pnodes=2))
            bucket = checkpoint_bucket(client.subjects, sid)
            await read_refused(host, host_refusals, bucket)  # not placed yet: nobody is granted it
            state = await wait_for(client, sid, lambda s: s.last_checkpoint is not None)
            checkpoint = state.last_checkpoint
            victim = checkpoint.objects[0]
            assert checkpoint.bucket == bucket

            # the outsider: a valid PNode credential, hosting nothing of this session
            await read_refused(outsider, refusals, bucket)
            js = outsider.jetstream(timeout=2)
            with pytest.raises(nats.errors.TimeoutError):
                await js.get_last_msg(f"OBJ_{bucket}", meta_subject(bucket, victim.object))
            await refusals.saw(f"$JS.API.STREAM.MSG.GET.OBJ_{bucket}")
            with pytest.raises(nats.errors.TimeoutError):
                await js.subscribe(f"$O.{bucket}.C.>", stream=f"OBJ_{bucket}", ordered_consumer=True)
            await refusals.saw(f"$JS.API.CONSUMER.CREATE.OBJ_{bucket}")
            await outsider.publish(f"$O.{bucket}.C.planted", b"its own object")
            await refusals.saw(f"$O.{bucket}.C.planted")
            rollup = meta_subject(bucket, victim.object)
            await outsider.publish(rollup, b'{"name": "x", "deleted": true}', headers={"Nats-Rollup": "sub"})
            await refusals.saw(rollup)
            for attempt, subject in ((js.purge_stream, "PURGE"), (js.delete_stream, "DELETE")):
                with pytest.raises(nats.errors.TimeoutError):
                    await attempt(f"OBJ_{bucket}")
                await refusals.saw(f"$JS.API.STREAM.{subject}.OBJ_{bucket}")

            # a PNode hosting the session: its live connection was granted the bucket at the placement
            store = await existing_bucket(host.jetstream(), bucket)
            assert digest((await store.get(victim.object)).data) == victim.digest
            js = host.jetstream(timeout=2)
            for attempt, subject in ((js.purge_stream, "PURGE"), (js.delete_stream, "DELETE")):
                with pytest.raises(nats.errors.TimeoutError):
                    await attempt(f"OBJ_{bucket}")
                await host_refusals.saw(f"$JS.API.STREAM.{subject}.OBJ_{bucket}")

            await command(client, sid, StopSession())
            stopped = await wait_for(client, sid, lambda s: s.status == "stopped")
            host_refusals.errors.clear()
            await refused_soon(host, host_refusals, bucket)  # the session ended: its PNodes no longer reach it
        finally:
            for nc in (host, outsider):
                await nc.close()
        # nothing was changed: every object of every kept checkpoint reads back, through the owner's API
        for kept in stopped.checkpoints:
            for entry in kept.objects:
                data = await client.read_object(ReadObject(session_id=sid, object=entry.object))
                assert digest(data) == entry.digest, entry.object


async def test_hosting_pnodes_still_save_load_fail_over_start_from_weights_and_sample(tmp_path):
    async with running_cluster(tmp_path, pnodes=3) as (client, supervisor):
        source = await run_to_end(client, config(steps=6, checkpoint_every=3, min_pnodes=3))
        cfg = config(steps=30, checkpoint_every=5, min_pnodes=3, init_from=InitFrom(session_id=source, step=6),
                     sample_every=10, sample_prompts=["def "])
        clean = await run_to_end(client, cfg)
        sid, _ = await start_session(client, cfg)
        await wait_for(client, sid, lambda s: s.next_step >= 8)
        supervisor.services["pnode-2"].process.kill()  # the supervisor starts it again: it is placed anew
        await wait_for(client, sid, lambda s: s.status == "completed", timeout=240)
        events = [e.payload for _, e in await session_events(client, sid)]
        clean_events = await session_events(client, clean)
        assert await losses(client, sid) == await losses(client, clean)
        assert final_digests(await session_events(client, sid)) == final_digests(clean_events)
    assert any(isinstance(e, RolledBack) for e in events), "restored after the failover"
    assert any(isinstance(e, InitializedFrom) and e.session_id == source for e in events)
    assert {e.step for e in events if isinstance(e, SamplesGenerated)} >= {10, 20, 30}
    assert {e.bucket for e in events if isinstance(e, CheckpointCommitted)} == {checkpoint_bucket(client.subjects, sid)}


async def test_damaged_newest_checkpoints_are_discarded_and_the_session_ends_as_a_clean_run(tmp_path):
    async with running_cluster(tmp_path, pnodes=2) as (client, supervisor):
        cfg = config(steps=30, checkpoint_every=5, min_pnodes=2)
        clean = await run_to_end(client, cfg)
        clean_events = await session_events(client, clean)
        sid, _ = await start_session(client, cfg)
        await wait_for(client, sid, lambda s: s.next_step >= 11)
        await command(client, sid, PauseSession())
        paused = await wait_for(client, sid, lambda s: s.status == "paused")
        damaged = paused.checkpoints[-2:]  # the newest (where it paused) and the one before, a multiple of 5
        tamperer = await connect_as(supervisor.credentials, "superuser", "tamperer")  # someone with the server's files
        store = await existing_bucket(tamperer.jetstream(), paused.last_checkpoint.bucket)
        for checkpoint in damaged:
            await store.put(checkpoint.objects[-1].object, b"not a checkpoint")
        await tamperer.close()
        await command(client, sid, ResumeSession())
        await wait_for(client, sid, lambda s: s.status == "completed", timeout=180)
        events = [e.payload for _, e in await session_events(client, sid)]
        assert await losses(client, sid) == await losses(client, clean)
        assert final_digests(await session_events(client, sid)) == final_digests(clean_events)
    discarded = [e for e in events if isinstance(e, CheckpointDiscarded)]
    assert [e.step for e in discarded] == [c.step for c in reversed(damaged)]
    assert all(c.objects[-1].object in e.reason for e, c in zip(discarded, reversed(damaged)))
    # the steps since the newest intact checkpoint ran again: the older step is saved again, to the clean run's bits
    step = damaged[0].step
    again = [e for e in events if isinstance(e, CheckpointCommitted) and e.step == step][-1]
    theirs = next(e.payload for _, e in clean_events if isinstance(e.payload, CheckpointCommitted) and e.payload.step == step)
    assert {o.vnode: o.digest for o in again.objects} == {o.vnode: o.digest for o in theirs.objects}


async def test_a_site_reaches_the_checkpoints_its_pnodes_host_and_its_plans_are_not_lost(tmp_path):
    """A remote site's leaf link carries its PNodes' grants; a placement changes them, which closes the
    link (a live one keeps what it connected with), and the grant returns only once the site is back:
    the plan the orchestrator sends right after reaches the PNode."""
    s = Subjects()
    with EmbeddedNats(tmp_path / "hub", listen=f"127.0.0.1:{free_port()}", leaf_listen=f"127.0.0.1:{free_port()}") as hub:
        orchestrator = await bus.connect(hub.credential("orchestrator"), name="orchestrator")
        made = invite(hub.security, "leaf", hub.public_leaf_urls(), hub.tls.trust(), name="site", site_pnodes=1)
        hub.apply_members()
        with LeafServer(tmp_path / "site", made) as site:
            site.wait_linked()
            pnode, _ = await connected(site.credential("pnode", "site-0"), "site-0")
            plans = []

            async def on_plan(msg) -> None:
                plans.append(msg.data)

            await pnode.subscribe(s.pnode_ctl("site-0"), cb=on_plan)
            await pnode.flush()
            try:
                for sid, hosts in (("theirs", ["elsewhere"]), ("ours", ["site-0"])):
                    with hub.security.grants.edit() as grants:  # what the authority does at a placement
                        grants.host(SessionHosts(session_id=sid, pnodes=hosts, as_of=1))
                    hub.apply_members()
                    await orchestrator.jetstream().create_object_store(checkpoint_bucket(s, sid))
                await orchestrator.publish(s.pnode_ctl("site-0"), b"the plan")  # once, right after the grant
                await wait_until_async(lambda: _value(bool(plans)), 5, "the plan crossing the link")

                store = await existing_bucket(pnode.jetstream(), checkpoint_bucket(s, "ours"))
                await store.put("weights", b"w" * 300_000)
                assert (await store.get("weights")).data == b"w" * 300_000
                # the hub's side of the link lets no call about another session's bucket through
                with pytest.raises((nats.errors.TimeoutError, ServiceUnavailableError)):
                    await pnode.jetstream(timeout=2).object_store(checkpoint_bucket(s, "theirs"))
            finally:
                await pnode.close()
                await orchestrator.close()


async def _value(value):
    return value
