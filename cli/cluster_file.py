"""`cluster.json`: where a running `computeall up` tells clients its NATS and monitor addresses."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from pydantic import BaseModel

from .errors import UserError


class ServiceStatus(BaseModel):
    name: str
    kind: str  # nats, orchestrator, pnode, dataset, monitor
    pid: int | None
    state: str  # running, restarting, stopped, external
    url: str | None = None  # a nats-server's client URL
    monitoring: str | None = None  # a site's leaf nats-server's monitoring endpoint (/leafz, /connz)


class ClusterInfo(BaseModel):
    nats: str
    public_nats: list[str] = []  # how other machines dial NATS (`up --public`): what invites carry
    public_leaf: list[str] = []  # how remote sites' leaf servers dial it: what leaf invites carry
    monitor: str | None = None
    services: list[ServiceStatus] = []
    default_user: str | None = None


DATA_DIR_ENV = "COMPUTEALL_DATA_DIR"


def data_dir(explicit: str | None = None) -> Path:
    """Where `computeall up` keeps a deployment's files, absolute from the start, so every service it
    starts and every path it hands on means the same wherever it runs: --data-dir, else
    $COMPUTEALL_DATA_DIR, else ./.computeall."""
    return Path(explicit or os.environ.get(DATA_DIR_ENV) or ".computeall").expanduser().absolute()


def deployment_dir(explicit: str | None = None) -> Path:
    """The deployment a command acts on, found from any directory: --data-dir or $COMPUTEALL_DATA_DIR
    when given; else ./.computeall when a deployment runs from there; else the one a running
    `computeall up` recorded for this user (`running_pointer`); else ./.computeall, whose absence the
    command then reports."""
    if explicit or os.environ.get(DATA_DIR_ENV):
        return data_dir(explicit)
    here = data_dir()
    if running(read(here)):
        return here
    recorded = recorded_deployment()
    return recorded if recorded is not None and running(read(recorded)) else here


def add_data_dir_argument(p: argparse.ArgumentParser, **kwargs) -> None:
    """`--data-dir` of the commands that act on a running deployment (`deployment_dir`)."""
    p.add_argument("--data-dir", default=None, **kwargs,
                   help="the deployment's data dir (default: $COMPUTEALL_DATA_DIR, else ./.computeall when it runs "
                        "from there, else the one a running `computeall up` recorded)")


def running_pointer() -> Path:
    """Where `computeall up` records its data dir for this user's commands in other directories
    ($XDG_STATE_HOME, by default ~/.local/state)."""
    state = os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state"
    return Path(state) / "computeall" / "running-data-dir"


def record_running(directory: Path) -> None:
    pointer = running_pointer()
    pointer.parent.mkdir(parents=True, exist_ok=True)
    tmp = pointer.with_suffix(".tmp")
    tmp.write_text(str(directory))
    tmp.replace(pointer)


def forget_running(directory: Path) -> None:
    """At `up`'s exit: the pointer goes, unless another `up` has recorded itself since."""
    if recorded_deployment() == directory:
        running_pointer().unlink(missing_ok=True)


def recorded_deployment() -> Path | None:
    try:
        return Path(running_pointer().read_text().strip())
    except (OSError, ValueError):
        return None


def pid_alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # alive, owned by someone else
    return True


def running(info: "ClusterInfo | None") -> bool:
    """Whether the deployment a cluster.json describes runs now: one of its services is alive."""
    return info is not None and any(s.state == "running" and s.kind != "nats" and pid_alive(s.pid) for s in info.services)


def write(directory: Path, info: ClusterInfo) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / "cluster.json.tmp"
    tmp.write_text(info.model_dump_json(indent=2))
    tmp.replace(directory / "cluster.json")


def read(directory: Path) -> ClusterInfo | None:
    path = directory / "cluster.json"
    if not path.exists():
        return None
    return ClusterInfo.model_validate(json.loads(path.read_text()))


def resolve_nats_url(explicit: str | None, directory: str | None = None) -> str:
    """`--nats URL`, else `NATS_URL`, else the running cluster's `cluster.json`."""
    if explicit:
        return explicit
    if os.environ.get("NATS_URL"):
        return os.environ["NATS_URL"]
    where = deployment_dir(directory)
    info = read(where)
    if info:
        return info.nats
    raise UserError(
        f"no running computeall found: start one with `computeall up` (or pass --nats URL / set NATS_URL); "
        f"looked for {where / 'cluster.json'} and for the deployment `computeall up` records in {running_pointer()}"
    )
