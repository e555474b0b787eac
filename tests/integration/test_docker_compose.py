"""`docker compose up` for real, as a user starts it: the project's image, built by `make docker`'s
script (which installs and starts the engine where it must, from a local Debian base), Debian's
docker-compose with the `single` profile and the `.env` that `computeall compose-env` prints; a
tiny-gpt session created by the host's CLI (its data uploaded through the compose nats-server),
trained by the services in the containers on three PNodes, with the losses of one plain torch model
on the same batches. The project is taken down (containers, network, volumes) whatever happens, and
leaves no network interface behind on the host."""

from __future__ import annotations

import asyncio
import json
import os
import ssl
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from computeall.cli.client import connect
from computeall.cli.follow import follow_session
from computeall.cli.nats_server import free_port
from computeall.cli.security.deployment import Security
from computeall.cli.session_view import session_events
from computeall.network import load_network
from computeall.protocol.credentials import Credential
from computeall.protocol.events import Allocated, SessionCreated, StepCompleted

from .cluster import stdlib_corpus
from .reference import fetch_batches, reference_losses
from .test_training_run import NETWORK
from .waiting import wait_until

REPO = Path(__file__).resolve().parents[2]
ENGINE = REPO / "tools" / "docker_engine.py"
SKIPPED = 77  # ENGINE's status where no engine can run on this machine
COMPUTEALL = str(Path(sys.executable).parent / "computeall")
STEPS = 4

# a cold image build (no base, no layers) takes minutes: `make test` starts it in the background and this
# test runs last, waiting for it (the script's builds queue on a lock)
pytestmark = [pytest.mark.timeout(1800), pytest.mark.last, pytest.mark.machines]


@pytest.fixture(scope="module")
def image() -> None:
    """The project's image, built (or found current) by the script `make docker` runs."""
    made = subprocess.run([sys.executable, str(ENGINE)], capture_output=True, text=True, timeout=1500)
    if made.returncode == SKIPPED:
        pytest.skip(made.stderr.strip())
    assert made.returncode == 0, f"{ENGINE.name} failed:\n{made.stdout[-3000:]}\n{made.stderr[-3000:]}"


def cli(*args: str | Path) -> str:
    done = subprocess.run([COMPUTEALL, *map(str, args)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"computeall {' '.join(map(str, args))}: {done.stderr[-2000:]}"
    return done.stdout


def answers(*args: str | Path) -> bool:
    return subprocess.run([COMPUTEALL, *map(str, args)], capture_output=True, timeout=60).returncode == 0


def docker_interfaces() -> set[str]:
    """The host's interfaces of docker's making: its networks' bridges and its containers' veth ends
    (other tests on this machine make interfaces of their own meanwhile)."""
    names = (link["ifname"] for link in json.loads(subprocess.check_output(["ip", "-json", "link"])))
    return {name for name in names if name.startswith(("br-", "veth", "docker"))}


def labelled(kind: str, project: str) -> list[str]:
    """The project's containers, networks or volumes the engine still has."""
    listing = [*(["ps", "--all"] if kind == "container" else [kind, "ls"]), "--quiet",
               "--filter", f"label=com.docker.compose.project={project}"]
    return subprocess.check_output(["docker", *listing], text=True).split()


@contextmanager
def compose_project(env_file: Path, project: str) -> Iterator[list[str]]:
    """docker-compose's command line for the repository's file as `project`; taken down on the way out,
    its logs printed when something failed (pytest shows them with the failure)."""
    compose = ["docker-compose", "--project-directory", str(REPO), "--file", str(REPO / "docker-compose.yml"),
               "--project-name", project, "--env-file", str(env_file)]
    try:
        yield compose
    except BaseException:
        print(subprocess.run([*compose, "logs", "--no-color", "--tail", "40"], capture_output=True, text=True).stdout)
        raise
    finally:
        subprocess.run([*compose, "down", "--volumes", "--remove-orphans", "--timeout", "20"], capture_output=True,
                       timeout=180)


def page(url: str, deployment: Path) -> str | None:
    """The page at `url`, trusting only the deployment's CA; None until it answers 200."""
    try:
        answer = httpx.get(url, verify=ssl.create_default_context(cafile=deployment / "security" / "tls" / "ca.pem"))
    except httpx.HTTPError:
        return None
    return answer.text if answer.status_code == 200 else None


async def trained(credential: Credential, sid: str) -> tuple[list, list[float]]:
    """The session's events once it completed, and the losses of plain torch on the batches it was given."""
    async with connect(credential) as client:
        outcome = await asyncio.wait_for(follow_session(client, sid, STEPS, progress=False), 600)
        assert outcome.ok, outcome.message
        events = [e.payload for _, e in await session_events(client, sid)]
        config = next(e for e in events if isinstance(e, SessionCreated)).config
        spec = load_network(config.network_yaml)
        batches = await fetch_batches(client, config, spec)
    return events, reference_losses(spec, config, batches)


def test_compose_up_trains_tiny_gpt_as_one_torch_model_does(image, tmp_path):
    links = docker_interfaces()
    deployment, env_file, project = tmp_path / "deployment", tmp_path / ".env", f"computeall-test-{os.getpid()}"
    # free host ports: other tests' nats-servers listen on 4222 of other loopback addresses
    nats_port, monitor_port = free_port(), free_port()
    while monitor_port == nats_port:
        monitor_port = free_port()
    env_file.write_text(cli("compose-env", "--data-dir", deployment, "--nats-port", nats_port, "--monitor-port", monitor_port))
    with compose_project(env_file, project) as compose:
        up = subprocess.run([*compose, "--profile", "single", "up", "--detach", "--no-build"], capture_output=True,
                            text=True, timeout=300)
        assert up.returncode == 0, up.stderr[-3000:]
        assert docker_interfaces() > links, "the project's network: a bridge and a veth per container"
        # up once the user's reads are answered: the bus, the orchestrator and the dataset service
        wait_until(lambda: answers("session", "list", "--data-dir", deployment)
                   and answers("dataset", "list", "--data-dir", deployment), 180, "the compose services answering", 1.0)
        created = cli("session", "create", "--network", NETWORK, "--data", *stdlib_corpus(), "--steps", STEPS,
                      "--batch-size", "8", "--micro-batches", "2", "--seed", "7", "--min-pnodes", "3", "--stages", "3", "--json",
                      "--data-dir", deployment)
        user = Credential.load(Security(deployment / "security").credential_path("user", "local"))
        events, reference = asyncio.run(trained(user, json.loads(created)["session_id"]))
        dashboard = wait_until(lambda: page(f"https://localhost:{monitor_port}/", deployment), 60, "the dashboard", 1.0)
    allocated = next(e for e in events if isinstance(e, Allocated))
    assert sorted(allocated.pnodes) == ["pnode-0", "pnode-1", "pnode-2"], "spread over the three PNode containers"
    losses = [e.loss for e in events if isinstance(e, StepCompleted)]
    assert len(losses) == STEPS
    for step, (ours, plain) in enumerate(zip(losses, reference)):
        assert abs(ours - plain) <= 1e-4 * abs(plain), f"step {step}: compose {ours} vs plain torch {plain}"
    assert reference[-1] < reference[0]
    assert '<div id="app">' in dashboard, "the monitor serves the dashboard the image holds, over HTTPS"
    for kind in ("container", "network", "volume"):
        assert labelled(kind, project) == [], f"`down` left the project's {kind}s"
    assert docker_interfaces() == links, "docker left network interfaces on the host"
