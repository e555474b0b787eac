"""`cluster.json`: where a running `computeall up` tells clients its NATS and monitor addresses."""

from __future__ import annotations

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


def data_dir(explicit: str | None = None) -> Path:
    return Path(explicit or os.environ.get("COMPUTEALL_DATA_DIR") or ".computeall")


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
    info = read(data_dir(directory))
    if info:
        return info.nats
    raise UserError(
        f"no running computeall found: start one with `computeall up` (or pass --nats URL / set NATS_URL); "
        f"looked for {data_dir(directory) / 'cluster.json'}"
    )
