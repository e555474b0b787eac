"""Helpers of the monitor API tests (no tests here): the CLI as a member, users, catching up,
heartbeats sent as their PNode, a GraphQL websocket."""

from __future__ import annotations

import json
import subprocess

import websockets

from computeall.protocol.subjects import Subjects
from computeall.protocol.telemetry import Heartbeat

from ..identities import connect_as
from ..monitor_harness import PYTHON, MonitorProcess, data


def cli(monitor: MonitorProcess, *args: str) -> subprocess.CompletedProcess:
    """The CLI as the operator for `user create`, else as the local user."""
    role = "admin" if args[:2] == ("user", "create") else "user"
    return subprocess.run(
        [PYTHON, "-m", "computeall.cli.main", *args, "--credential", str(monitor.server.credential_file(role))],
        capture_output=True, text=True, timeout=30,
    )


def create_user(monitor: MonitorProcess, name: str) -> str:
    result = cli(monitor, "user", "create", name, "--json")
    assert result.returncode == 0, result.stderr
    reply = json.loads(result.stdout)
    assert reply["user"] == name
    return reply["api_key"]


def caught_up(monitor: MonitorProcess, key: str, seq: int) -> bool:
    stats = data(monitor.url, key, "{ monitor { positions } }")["monitor"]["positions"]
    return stats.get("CA_LOG", 0) >= seq


async def beat(system: MonitorProcess, heartbeat: Heartbeat) -> None:
    """One heartbeat, sent as the PNode it is from."""
    nc = await connect_as(system.server, "pnode", heartbeat.pnode)
    await nc.publish(Subjects().heartbeat(heartbeat.pnode), heartbeat.model_dump_json().encode())
    await nc.flush()
    await nc.close()


async def ws_connect(url: str, params: dict):
    ws = await websockets.connect(url.replace("http", "ws") + "/graphql", subprotocols=["graphql-transport-ws"])
    await ws.send(json.dumps({"type": "connection_init", "payload": params}))
    return ws
