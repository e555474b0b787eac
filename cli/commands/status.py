"""`computeall status [--json]`: the running system's addresses and services; on a bus spanning machines,
every server of the bus with its machine and the streams it leads, as this machine's server sees them."""

from __future__ import annotations

import argparse
import json

from ..bus_machine import ServerStatus, bus_status
from ..cluster_file import ClusterInfo, add_data_dir_argument, deployment_dir, pid_alive, read
from ..errors import UserError
from ..identity import deployment_security
from ..security.bus_state import LocalState


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("status", help="show the running system")
    add_data_dir_argument(p)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    directory = deployment_dir(args.data_dir)
    info = read(directory)
    if info is None:
        raise UserError(f"nothing is running from {directory}: start it with `computeall up`")
    for service in info.services:
        if service.state == "running" and not pid_alive(service.pid):
            service.state = "dead"
    servers = _bus_servers(info, args.data_dir)
    if args.json:
        print(json.dumps({**info.model_dump(exclude={"default_user"}),
                          **({"servers": [s.model_dump() for s in servers]} if servers else {})}, indent=2))
        return 0
    print(f"nats     {info.nats}")
    print(f"monitor  {info.monitor or '(starting)'}")
    for s in info.services:
        print(f"  {s.name:<14} {s.kind:<12} pid {s.pid or '-':<8} {s.state}")
    for s in servers:
        role = ", ".join((["JetStream meta leader"] if s.meta_leader else []) + [f"leads {', '.join(s.leads)}"] * bool(s.leads))
        print(f"  server {s.name:<12} {s.machine or '?':<16} {'up' if s.up else 'DOWN':<5} {role}")
    return 0


def _bus_servers(info: ClusterInfo, data_dir: str | None) -> list[ServerStatus]:
    """The servers of a bus spanning machines (none for a bus on one machine), from this machine's server."""
    roster = LocalState(deployment_security(data_dir)).servers.read()
    local = next((s for s in info.services if s.kind == "nats" and s.monitoring and s.state == "running"), None)
    if not roster.servers or local is None:
        return []
    try:
        return bus_status(local.monitoring, roster)
    except OSError:
        return [ServerStatus(name=name, machine=r.machine, route=r.route, clients=r.clients, up=False)
                for name, r in roster.servers.items()]
