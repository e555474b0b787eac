"""Two machines for real: `computeall up` listening beyond loopback (TLS) in the root network
namespace, `computeall pnode --join-file TOKEN_FILE` in another namespace behind a veth pair. A session
trains across both with the losses of the one-machine run; no token, or a revoked one, is refused,
and revoking the invite disconnects the joined PNode."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from computeall.cli.client import connect
from computeall.cli.follow import follow_session, start_session
from computeall.cli.identity import deployment_security
from computeall.cli.nats_server import free_port
from computeall.cli.session_view import session_events
from computeall.protocol.events import Allocated, StepCompleted

from .sessions import config
from .waiting import wait_until

COMPUTEALL = str(Path(sys.executable).parent / "computeall")
ROOT_IP, FAR_IP = "10.213.7.1", "10.213.7.2"

pytestmark = pytest.mark.machines  # conftest: one at a time


def _ip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True)


@pytest.fixture
def far_namespace():
    """A second "machine": a network namespace reached from the root one through a veth pair."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("needs root and iproute2 (ip netns) to make a second machine")
    tag = uuid.uuid4().hex[:6]
    ns, here, there = f"ca-far-{tag}", f"ca{tag}a", f"ca{tag}b"
    if _ip("netns", "add", ns).returncode != 0:
        pytest.skip("`ip netns add` is refused here")
    try:
        for step in (["link", "add", here, "type", "veth", "peer", "name", there], ["link", "set", there, "netns", ns],
                     ["addr", "add", f"{ROOT_IP}/24", "dev", here], ["link", "set", here, "up"],
                     ["netns", "exec", ns, "ip", "addr", "add", f"{FAR_IP}/24", "dev", there],
                     ["netns", "exec", ns, "ip", "link", "set", there, "up"],
                     ["netns", "exec", ns, "ip", "link", "set", "lo", "up"]):
            result = _ip(*step)
            assert result.returncode == 0, (step, result.stderr)
        yield ns
    finally:
        _ip("link", "del", here)  # takes its peer with it
        _ip("netns", "del", ns)


def far(ns: str, *args: str, log: Path) -> subprocess.Popen:
    return subprocess.Popen(["ip", "netns", "exec", ns, COMPUTEALL, *args], stdout=open(log, "ab"), stderr=subprocess.STDOUT)


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([COMPUTEALL, *args], capture_output=True, text=True, timeout=60)


async def train(data_dir: Path, cfg) -> tuple[list[float], set[str]]:
    """A session as the local user of `data_dir`'s cluster: its losses and the PNodes it ran on."""
    async with connect(deployment_security(str(data_dir)).local("user", "local")) as client:
        sid, command_id = await start_session(client, cfg)
        outcome = await follow_session(client, sid, cfg.steps, progress=False, command_id=command_id)
        assert outcome.ok, outcome.message
        events = [e.payload for _, e in await session_events(client, sid)]
    placed = {p for e in events if isinstance(e, Allocated) for p in e.pnodes}
    return [e.loss for e in events if isinstance(e, StepCompleted)], placed


async def test_a_pnode_joins_from_another_machine_with_an_invite(far_namespace, tmp_path):
    data_dir, port = tmp_path / "here", free_port()
    up = subprocess.Popen([COMPUTEALL, "up", "--listen", f"0.0.0.0:{port}", "--pnodes", "1", "--processes-on-machine", "2",
                           "--data-dir", str(data_dir)],
                          stdout=open(tmp_path / "up.log", "wb"), stderr=subprocess.STDOUT)
    joined = None
    try:
        wait_until((data_dir / "cluster.json").exists, 90, "computeall up writing cluster.json", interval=0.2)
        assert f"tls://{ROOT_IP}:{port}" in json.loads((data_dir / "cluster.json").read_text())["public_nats"]
        one_machine, placed = await train(data_dir, config(steps=6, checkpoint_every=0, min_pnodes=1))
        assert placed == {"pnode-0"}

        # without a token: the server does not know this machine
        stranger = subprocess.run(["ip", "netns", "exec", far_namespace, COMPUTEALL, "pnode", "--nats",
                                   f"tls://{ROOT_IP}:{port}", "--name", "stranger"], capture_output=True, text=True, timeout=120)
        assert stranger.returncode != 0 and "cannot connect" in stranger.stderr, stranger.stderr[-2000:]

        invite = json.loads(cli("invite", "pnode", "--name", "far", "--json", "--data-dir", str(data_dir)).stdout)
        token_file = tmp_path / "far.token"  # never on the command line (docs/security.md)
        token_file.write_text(invite["token"])
        joined = far(far_namespace, "pnode", "--join-file", str(token_file), "--processes-on-machine", "2",
                     log=tmp_path / "far.log")
        two_machines, placed = await train(data_dir, config(steps=6, checkpoint_every=0, min_pnodes=2))
        assert placed == {"pnode-0", "far"}, "the session ran across both machines"
        assert len(two_machines) == len(one_machine) == 6
        # every PNode has the threads of one of two processes on its machine: the same bits
        assert two_machines == one_machine

        revoked = cli("invite", "revoke", invite["id"], "--data-dir", str(data_dir))
        assert revoked.returncode == 0, revoked.stderr
        try:
            assert joined.wait(60) != 0, "the revoked PNode was disconnected and exits"
        except subprocess.TimeoutExpired:
            pytest.fail("the revoked PNode still runs a minute later:\n" + (tmp_path / "far.log").read_text()[-3000:])
        assert "no longer accepts this PNode's credential" in (tmp_path / "far.log").read_text()
        again = subprocess.run(["ip", "netns", "exec", far_namespace, COMPUTEALL, "pnode", "--join-file", str(token_file)],
                               capture_output=True, text=True, timeout=120)
        assert again.returncode != 0 and "Authorization Violation" in again.stderr, again.stderr[-2000:]
        listed = json.loads(cli("invite", "list", "--json", "--data-dir", str(data_dir)).stdout)
        assert [(r["pnode"], r["state"]) for r in listed] == [("far", "revoked")]
    finally:
        if joined is not None and joined.poll() is None:
            joined.send_signal(signal.SIGTERM)
            joined.wait(30)
        up.send_signal(signal.SIGINT)
        up.wait(60)
