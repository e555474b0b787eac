"""Shared fixtures: a real nats-server with JetStream on a free port."""

from __future__ import annotations

import os
from pathlib import Path

# Before torch starts OpenMP here or in any process a test starts: threads that wait sleep instead of
# spinning. Tests run several processes on few cores, and a spinning wait there costs a tiny op 20x.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import pytest

from computeall.cli.nats_server import EmbeddedNats

REPO = Path(__file__).resolve().parent.parent
# the shared data folder beside the checkout (/work/main), or beside its worktree folder (/work/wt/NAME)
SHAKESPEARE = next((p / "shared" / "data" / "tinyshakespeare.txt" for p in REPO.parents
                    if (p / "shared" / "data" / "tinyshakespeare.txt").exists()),
                   REPO.parent / "shared" / "data" / "tinyshakespeare.txt")


@pytest.hookimpl(tryfirst=True)  # before xdist's own, which reads the groups into the tests' ids
def pytest_collection_modifyitems(config, items):
    """Tests marked `last` run after every other: the compose test waits for the image `make test` builds
    in the background meanwhile (tools/docker_engine.py). Tests marked `machines` share one xdist group:
    their namespaces' addresses and the docker engine are the host's, so they run one at a time."""
    items.sort(key=lambda item: item.get_closest_marker("last") is not None)
    for item in items:
        if item.get_closest_marker("machines") is not None:
            item.add_marker(pytest.mark.xdist_group("machines"))


def pytest_collection_finish(session):
    """A grouped test's id carries its group once xdist has read it; a pytest that keeps ids where xdist
    cannot rename them would silently run the `machines` tests side by side."""
    if session.config.getoption("loadgroup", False):  # set on the workers of `--dist loadgroup`
        ungrouped = [i.nodeid for i in session.items if i.get_closest_marker("machines") and "@machines" not in i.nodeid]
        if ungrouped:
            raise pytest.UsageError(f"xdist did not group {ungrouped[:3]}: use a pytest whose ids xdist can rename "
                                    "(pyproject.toml pins it)")


@pytest.fixture(autouse=True, scope="session")
def own_state_home(tmp_path_factory):
    """`computeall up` records its data dir for the user's commands in other directories, under
    $XDG_STATE_HOME: the tests' ups record theirs in a folder of the run's, never in the user's home."""
    os.environ["XDG_STATE_HOME"] = str(tmp_path_factory.mktemp("state"))


@pytest.fixture
def nats_server(tmp_path: Path):
    with EmbeddedNats(tmp_path / "nats") as server:
        yield server


@pytest.fixture
def nats_url(nats_server: EmbeddedNats) -> str:
    return nats_server.url


@pytest.fixture
def shakespeare() -> Path:
    if not SHAKESPEARE.exists():
        pytest.fail(f"{SHAKESPEARE} is not present: the tests train on the shared corpus beside the checkout", pytrace=False)
    return SHAKESPEARE
