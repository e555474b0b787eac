"""`computeall status [--json]`: the running system's addresses and services."""

from __future__ import annotations

import argparse
import json

from ..cluster_file import add_data_dir_argument, deployment_dir, pid_alive, read
from ..errors import UserError


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
    if args.json:
        print(json.dumps(info.model_dump(exclude={"default_user"}), indent=2))
        return 0
    print(f"nats     {info.nats}")
    print(f"monitor  {info.monitor or '(starting)'}")
    for s in info.services:
        print(f"  {s.name:<14} {s.kind:<12} pid {s.pid or '-':<8} {s.state}")
    return 0
