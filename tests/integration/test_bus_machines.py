"""A bus spanning three machines (network namespaces, each with its own data dir), set up as a user would:
`up --public --nats-cluster 3` on the first, `invite server` and `up --join-bus-file` on the others.

The first machine runs the server leading CA_LOG, the active orchestrator and a PNode of the session; the
second a PNode and a standby orchestrator; the third a server and a standby. Everything on the first is
killed -9 at once mid-session: a standby claims the session within the heartbeat timeout and it completes
with a clean run's losses and final digests, each step recorded once, every kept checkpoint whole. A
server that was never invited (with the route secret even) does not route to the bus, and an invite
revoked before use joins nothing. A remote site's leaf server whose server dies links to another.
Skipped where network namespaces cannot be made (not root, or `ip netns` refused)."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from .wan import require_lab

require_lab()

from bench.wanlab.machine_bus import COMPUTEALL, MachineBus  # noqa: E402
from bench.wanlab.machines import Machines  # noqa: E402
from computeall.cli.client import connect  # noqa: E402
from computeall.cli.follow import start_session  # noqa: E402
from computeall.cli.nats_server import monitoring, nats_binary  # noqa: E402
from computeall.cli.security.deployment import Security  # noqa: E402
from computeall.cli.security.server_config import ClusterSettings, ServerSettings, server_config  # noqa: E402
from computeall.cli.security.tls import DeploymentTls  # noqa: E402
from computeall.cli.session_view import session_events  # noqa: E402
from computeall.protocol.bus_failover import ELECTION_MAX_S  # noqa: E402
from computeall.protocol.events import (  # noqa: E402
    Allocated, CheckpointCommitted, CheckpointPruned, SessionClaimed,
)
from computeall.protocol.session_reads import ReadObject  # noqa: E402
from computeall.protocol.subjects import LOG_STREAM  # noqa: E402
from computeall.protocol.telemetry import HEARTBEAT_TIMEOUT_S  # noqa: E402
from computeall.protocol.wire import digest  # noqa: E402

from .sessions import config, final_digests, losses, run_to_end, wait_for  # noqa: E402
from .waiting import wait_until, wait_until_async  # noqa: E402

STEPS = 10
KILL_AT = 5  # the step under way when the first machine dies

pytestmark = pytest.mark.machines  # conftest: one at a time


async def _ready(bus_: MachineBus) -> None:
    """Every machine's `up` says it is up (its services started on three servers)."""
    for i in range(3):
        await wait_until_async(lambda i=i: _says_up(bus_, i), 240, f"machine {i} up", interval=0.5)


async def _says_up(bus_: MachineBus, i: int) -> bool:
    return bus_.log(i).exists() and "computeall is up" in bus_.log(i).read_text(errors="replace")


async def test_losing_a_whole_machine_loses_nothing(tmp_path):
    with Machines(3) as lab:
        machines = MachineBus(lab, tmp_path, pnodes=(1, 1, 0))
        try:
            machines.start()
            await _scenario(machines, tmp_path)
        except BaseException:
            print(machines.tail(80))
            raise


async def _scenario(machines: MachineBus, tmp_path) -> None:
    await _ready(machines)
    async with connect(machines.user(up=[1])) as client:  # the CLI does not reconnect: not to the first machine
        servers = _status(machines, 1)
        assert sorted((s["name"], s["up"]) for s in servers) == [(n, True) for n in machines.names]
        assert all(s["machine"] and s["route"] for s in servers)
        assert sum(s["meta_leader"] for s in servers) == 1 and LOG_STREAM in {x for s in servers for x in s["leads"]}

        await machines.lead_stream_from(LOG_STREAM, 0)  # the first machine's loss takes CA_LOG's leader with it

        cfg = config(steps=STEPS, checkpoint_every=3, min_pnodes=1)
        clean = await run_to_end(client, cfg, timeout=300)
        clean_events = await session_events(client, clean)

        sid, _ = await start_session(client, cfg)
        await wait_for(client, sid, lambda s: s.next_step >= KILL_AT, timeout=240)
        killed_at = machines.kill(0)
        await wait_for(client, sid, lambda s: s.status == "completed", timeout=300)
        got, events = await losses(client, sid), await session_events(client, sid)

        placed = next(e.payload for _, e in events if isinstance(e.payload, Allocated))
        assert "pnode-0" in placed.pnodes, "the first machine's PNode had a part of the session"
        assert [s for s, _ in got] == list(range(STEPS)), "every step recorded once"
        assert got == await losses(client, clean), "the losses of a clean run"
        assert final_digests(events) == final_digests(clean_events)
        claims = [(e.ts, e.payload.orchestrator) for _, e in events if isinstance(e.payload, SessionClaimed)]
        taken = [(ts, who) for ts, who in claims if ts > killed_at]
        assert taken and taken[0][1] != claims[0][1], "a standby on another machine claimed the session"
        # the standby notices within the heartbeat timeout; the claim lands once CA_LOG, whose leader died too, has
        # elected another (and the read that waited on it was tried again)
        bound = max(HEARTBEAT_TIMEOUT_S, ELECTION_MAX_S) + 5.0
        assert taken[0][0] - killed_at <= bound, f"claimed {taken[0][0] - killed_at:.1f}s after the kill"
        pruned = {e.payload.step for _, e in events if isinstance(e.payload, CheckpointPruned)}
        kept = [e.payload for _, e in events if isinstance(e.payload, CheckpointCommitted) and e.payload.step not in pruned]
        for checkpoint in kept:  # no committed checkpoint lost with the machine
            for obj in checkpoint.objects:
                assert digest(await client.read_object(ReadObject(session_id=sid, object=obj.object))) == obj.digest
        print(f"claimed {taken[0][0] - killed_at:.1f}s after the first machine died; steps {[s for s, _ in got]}")

    await _uninvited_servers_cannot_join(machines, tmp_path)
    await _a_leaf_site_fails_over(machines, tmp_path)


async def _uninvited_servers_cannot_join(machines: MachineBus, tmp_path) -> None:
    """A nats-server with the route secret (stolen, say) but no certificate of the deployment's CA, and an
    `up --join-bus` whose invite was revoked: neither becomes a server of the bus."""
    third = machines.lab.machines[2]
    rogue_dir = tmp_path / "rogue"
    tls = DeploymentTls(rogue_dir / "tls")  # its own CA, as anyone can make
    cluster = ClusterSettings(name="computeall", server_name="rogue", host=third.ip, port=6223,
                              routes=(f"nats-route://{machines.lab.machines[1].ip}:6222",),
                              secret=Security(machines.data_dir(1) / "security").route_secret(), health_port=8299,
                              advertise=f"{third.ip}:6223", ca_file=str(tls.directory / "ca.pem"), monitor_host="127.0.0.1")
    text = server_config(ServerSettings(host=third.ip, port=4299, store_dir=str(rogue_dir / "js"),
                                        tls=tls.ensure([third.ip]), sections=cluster.sections()), [])
    (rogue_dir / "nats.conf").write_text(text)
    rogue = machines.lab.popen(third, [nats_binary(), "-c", str(rogue_dir / "nats.conf")], log=rogue_dir / "nats.log")
    try:
        await wait_until_async(lambda: _log_has(rogue_dir / "nats.log", "TLS"), 30, "the rogue's route refused")
        assert "rogue" not in {s["name"] for s in _status(machines, 1)}, "no route to the bus"
    finally:
        rogue.kill()

    invite = machines.invite("server", "late", on=1)
    revoked = subprocess.run([COMPUTEALL, "invite", "revoke", invite["id"], "--data-dir", str(machines.data_dir(1))],
                             capture_output=True, text=True, timeout=60)
    assert revoked.returncode == 0, revoked.stderr
    token = tmp_path / "late.token"
    token.touch(mode=0o600)
    token.write_text(invite["token"])
    late = subprocess.run(third.command([COMPUTEALL, "up", "--join-bus-file", str(token), "--listen", f"{third.ip}:4300",
                                         "--route-listen", f"{third.ip}:6300", "--data-dir", str(tmp_path / "late")]),
                          capture_output=True, text=True, timeout=120)
    assert late.returncode != 0 and "could not join the bus" in late.stderr, late.stderr[-2000:]


async def _log_has(path, text: str) -> bool:
    return path.exists() and text in path.read_text(errors="replace")


def _status(machines: MachineBus, i: int) -> list[dict]:
    """`computeall status --json`'s servers, on machine i (its server's monitoring endpoint is its own)."""
    done = subprocess.run(machines.lab.machines[i].command([COMPUTEALL, "status", "--json", "--data-dir",
                                                            str(machines.data_dir(i))]),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)["servers"]


async def _a_leaf_site_fails_over(machines: MachineBus, tmp_path) -> None:
    """A site's leaf server lists every server of the bus (the dead first machine's too) and links to a live
    one; when that one's machine dies it links to the last."""
    invite = machines.invite("leaf", "lab", "--pnodes", "1", on=1)
    token = tmp_path / "lab.token"
    token.touch(mode=0o600)
    token.write_text(invite["token"])
    site_dir = tmp_path / "site"
    env = {**os.environ, "XDG_STATE_HOME": str(site_dir / "state")}
    site = subprocess.Popen([COMPUTEALL, "up", "--leaf-file", str(token), "--pnodes", "0", "--data-dir", str(site_dir)],
                            stdout=open(tmp_path / "site.log", "wb"), stderr=subprocess.STDOUT, env=env)
    try:
        wait_until(lambda: (site_dir / "cluster.json").exists(), 90, "the site up", interval=0.3)
        leaf_monitoring = next(s["monitoring"] for s in json.loads((site_dir / "cluster.json").read_text())["services"]
                               if s["kind"] == "nats")
        linked = await wait_until_async(lambda: _linked_to(leaf_monitoring), 60, "the leaf linked")
        by_ip = {m.ip: i for i, m in enumerate(machines.lab.machines)}
        assert by_ip[linked] in (1, 2), "linked to a live server"
        machines.kill(by_ip[linked])
        other = await wait_until_async(lambda: _linked_to(leaf_monitoring, not_to=linked), 60, "the leaf linked again")
        assert by_ip[other] in (1, 2) and other != linked
    finally:
        site.terminate()
        site.wait(60)


async def _linked_to(leaf_monitoring: str, not_to: str | None = None) -> str | None:
    """The address of the server the site's leaf is linked to (other than `not_to`)."""
    try:
        leafs = monitoring(leaf_monitoring, "leafz").get("leafs") or []
    except OSError:
        return None
    ips = [leaf["ip"] for leaf in leafs if leaf.get("ip") and leaf["ip"] != not_to]
    return ips[0] if ips else None
