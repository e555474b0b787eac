"""Security stories of operations, against real servers and processes: wrong API keys are rate-limited
per client and per key prefix (over HTTP and over `ca.mon.auth`) while the owner still logs in from
elsewhere; invite tokens and the seeds in them never reach a process's argv (what `ps` shows every
user of the machine), nor the environment of what `up` starts, nor its logs; the monitor serves HTTPS
with the deployment's certificate (as docker-compose.yml runs it: tests/unit/test_compose_tls.py)."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import ssl
import subprocess
import sys
from pathlib import Path

import httpx
import psutil
import pytest

from computeall.cli.nats_server import EmbeddedNats, free_port
from computeall.cli.security.invitations import invite
from computeall.cli.security.tls import DeploymentTls
from computeall.protocol import monitor_api as api
from computeall.protocol.credentials import new_api_key
from computeall.protocol.invites import Invite
from computeall.protocol.secret_args import JOIN, LEAF
from computeall.protocol.subjects import Subjects

from .identities import connect_as
from .monitor.api import create_user
from .monitor_harness import MonitorProcess, monitor_running
from .waiting import wait_until

COMPUTEALL = str(Path(sys.executable).parent / "computeall")

ME = "{ me { name } }"


@pytest.fixture(scope="module")
def monitor(tmp_path_factory):
    with monitor_running(tmp_path_factory.mktemp("logins")) as monitor:
        yield monitor


@pytest.fixture(scope="module")
def keys(monitor):
    return {name: create_user(monitor, name) for name in ("alice", "bob")}


def login_from(address: str, monitor: MonitorProcess, key: str) -> httpx.Response:
    """A GraphQL request from `address` (any of 127.0.0.0/8 reaches the monitor on 127.0.0.1)."""
    with httpx.Client(transport=httpx.HTTPTransport(local_address=address), timeout=10) as http:
        return http.post(f"{monitor.url}/graphql", json={"query": ME}, headers={"Authorization": f"Bearer {key}"})


def test_wrong_keys_over_http_are_limited_per_address_and_per_prefix_and_the_owner_still_logs_in(monitor, keys):
    for _ in range(10):  # mallory guesses alice's keys from one address: each guess is checked...
        assert login_from("127.0.0.2", monitor, new_api_key("alice")).status_code == 401
    refused = login_from("127.0.0.2", monitor, keys["alice"])  # ...then nothing is, not even the right key
    assert refused.status_code == 429
    told = re.fullmatch(r"too many failed logins from 127\.0\.0\.2; retry in ([1-6]) s", refused.json()["errors"][0]["message"])
    assert told and refused.headers["retry-after"] == told[1], refused.text

    for i in range(3, 13):  # guesses of alice's keys from ten more addresses: the prefix's budget is spent
        assert login_from(f"127.0.0.{i}", monitor, new_api_key("alice")).status_code == 401
    again = login_from("127.0.0.3", monitor, new_api_key("alice"))
    assert again.status_code == 429
    assert again.json()["errors"][0]["message"].startswith("too many failed logins with keys ca.alice.…; retry in ")

    owner = login_from("127.0.0.1", monitor, keys["alice"])  # alice herself, from an address that never failed
    assert owner.status_code == 200 and owner.json()["data"] == {"me": {"name": "alice"}}
    assert login_from("127.0.0.3", monitor, keys["bob"]).json()["data"] == {"me": {"name": "bob"}}, \
        "bob's prefix was never guessed, and .3 failed only once"


async def test_wrong_keys_over_nats_are_limited_per_identity_and_another_identity_still_logs_in(monitor, keys):
    subject = api.monitor_subject(Subjects(), api.AUTH)

    async def ask(nc, key: str) -> api.MonitorReply:
        reply = await nc.request(subject, api.Auth(api_key=key).model_dump_json().encode(), timeout=10)
        return api.MonitorReply.model_validate_json(reply.data)

    mallory = await connect_as(monitor.server, "user", "mallory")
    bob = await connect_as(monitor.server, "user", "bob")
    try:
        for _ in range(10):
            assert (await ask(mallory, new_api_key("bob"))).error == "unknown or revoked API key"
        refused = await ask(mallory, keys["bob"])
        assert not refused.ok and refused.user is None
        assert re.fullmatch(r"too many failed logins from user:mallory; retry in [1-6] s", refused.error), refused.error
        assert (await ask(bob, keys["bob"])).user == "bob", "another identity, the key's owner, still logs in"
    finally:
        await mallory.close()
        await bob.close()


# -- no secret in argv ---------------------------------------------------------------------------------
@pytest.fixture
def hub(tmp_path):
    """The deployment other machines join: TLS listeners for clients and for remote sites' leaf servers."""
    with EmbeddedNats(tmp_path / "hub", listen=f"127.0.0.1:{free_port()}", leaf_listen=f"127.0.0.1:{free_port()}") as server:
        server.credential("orchestrator")
        yield server


def secrets_of(made: Invite) -> list[str]:
    """What must stay off every command line: the token, and each seed it carries."""
    return [made.token(), made.nkey_seed, *(p.nkey_seed for p in made.pnodes)]


def clean_process(pid: int, secrets: list[str], variables: tuple[str, ...] = ()) -> psutil.Process:
    """The process, once its argv (`/proc/<pid>/cmdline`, as `ps` reads it) is checked to hold no secret,
    and its environment none of `variables`."""
    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode()
    for secret in secrets:
        assert secret not in cmdline, f"a secret in the argv of {cmdline.split(chr(0))[:4]}"
    environ = Path(f"/proc/{pid}/environ").read_bytes().decode()
    for variable in variables:
        assert f"{variable}=" not in environ, f"{variable} in the environment of {cmdline.split(chr(0))[:4]}"
    return psutil.Process(pid)


async def heartbeats_of(hub: EmbeddedNats, names: set[str], processes: list[subprocess.Popen], timeout: float = 120):
    """Until each named PNode has heartbeated on the hub (it joined with its token)."""
    seen: set[str] = set()
    done = asyncio.Event()

    async def beat(msg) -> None:
        seen.add(msg.subject.rsplit(".", 1)[-1])
        if names <= seen:
            done.set()

    nc = await connect_as(hub, "orchestrator")
    await nc.subscribe(Subjects().heartbeat_all(), cb=beat)
    try:
        deadline = asyncio.get_running_loop().time() + timeout
        while not done.is_set():
            for process in processes:
                assert process.poll() is None, f"{process.args[:3]} exited with {process.returncode}"
            assert asyncio.get_running_loop().time() < deadline, f"no heartbeat from {names - seen} in {timeout:.0f}s"
            await asyncio.sleep(0.2)
    finally:
        await nc.close()


def stopped(*processes: subprocess.Popen) -> None:
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
    for process in processes:
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


async def test_pnodes_join_with_a_token_from_a_file_stdin_or_the_environment_never_argv(hub, tmp_path):
    made = {name: invite(hub.security, "pnode", hub.public_urls(), hub.tls.trust(), name=name)
            for name in ("by-file", "by-stdin", "by-env")}
    hub.apply_members()
    token_file = tmp_path / "by-file.token"
    token_file.write_text(made["by-file"].token())
    token_file.chmod(0o600)
    env = {k: v for k, v in os.environ.items() if k != JOIN.env}
    common = ["--simulate", "--data-dir", str(tmp_path / "pnodes")]
    log = open(tmp_path / "pnodes.log", "ab")
    by_file = subprocess.Popen([COMPUTEALL, "pnode", "--join-file", str(token_file), *common], env=env, stdout=log,
                               stderr=subprocess.STDOUT)
    by_stdin = subprocess.Popen([COMPUTEALL, "pnode", "--join", "-", *common], env=env, stdin=subprocess.PIPE,
                                stdout=log, stderr=subprocess.STDOUT)
    by_stdin.stdin.write(made["by-stdin"].token().encode())
    by_stdin.stdin.close()
    by_env = subprocess.Popen([COMPUTEALL, "pnode", *common], env={**env, JOIN.env: made["by-env"].token()}, stdout=log,
                              stderr=subprocess.STDOUT)
    try:
        await heartbeats_of(hub, set(made), [by_file, by_stdin, by_env])
        everything = [secret for m in made.values() for secret in secrets_of(m)]
        for process in (by_file, by_stdin, by_env):
            clean_process(process.pid, everything)
    finally:
        stopped(by_file, by_stdin, by_env)

    old_form = subprocess.run([COMPUTEALL, "pnode", "--join", made["by-file"].token()], env=env, capture_output=True,
                              text=True, timeout=60)
    assert old_form.returncode == 2, old_form.stderr
    assert "never on the command line" in old_form.stderr and "--join-file PATH" in old_form.stderr
    assert made["by-file"].token() not in old_form.stderr


async def test_a_site_started_from_the_environment_passes_no_secret_to_its_processes(hub, tmp_path):
    made = invite(hub.security, "leaf", hub.public_leaf_urls(), hub.tls.trust(), name="site", site_pnodes=2)
    hub.apply_members()
    site_dir = tmp_path / "site"
    up = subprocess.Popen([COMPUTEALL, "up", "--pnodes", "1", "--data-dir", str(site_dir)],
                          env={**os.environ, LEAF.env: made.token()}, stdout=open(tmp_path / "up.log", "ab"),
                          stderr=subprocess.STDOUT)
    try:
        wait_until((site_dir / "cluster.json").exists, 90, "the site linking to the hub", interval=0.2)
        await heartbeats_of(hub, {"site-0"}, [up])
        children = clean_process(up.pid, secrets_of(made)).children(recursive=True)
        kinds = sorted(Path(c.cmdline()[0]).name if "python" not in c.cmdline()[0] else c.cmdline()[2] for c in children)
        assert kinds == ["computeall.pnode", "nats-server"], "the site's leaf server and its one PNode"
        for child in children:
            clean_process(child.pid, secrets_of(made), variables=(LEAF.env, JOIN.env))
    finally:
        stopped(up)
    for log in [tmp_path / "up.log", *(site_dir / "logs").glob("*.log"), *(site_dir / "nats-leaf").rglob("*.log")]:
        text = log.read_text(errors="replace")
        assert not [s for s in secrets_of(made) if s in text], f"a secret in {log}"


# -- HTTPS ---------------------------------------------------------------------------
def test_the_monitor_serves_https_with_the_deployments_certificate(tmp_path):
    tls = DeploymentTls(tmp_path / "tls")
    files = tls.ensure()
    with monitor_running(tmp_path, "--tls-cert", files.cert_file, "--tls-key", files.key_file) as monitor:
        assert monitor.url.startswith("https://127.0.0.1:")
        trusted = httpx.post(f"{monitor.url}/graphql", json={"query": ME}, timeout=10,
                             verify=ssl.create_default_context(cafile=str(tls.ca_file)),
                             headers={"Authorization": f"Bearer {monitor.local_key}"})
        assert trusted.status_code == 200 and trusted.json()["data"] == {"me": {"name": "local"}}
        with pytest.raises(httpx.HTTPError):  # plain HTTP gets no answer
            httpx.post(monitor.url.replace("https://", "http://") + "/graphql", json={"query": ME}, timeout=5)
