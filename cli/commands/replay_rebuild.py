"""`computeall replay rebuild`: rebuild the monitor's DuckDB file from the event log.

A running monitor is asked to do it (it owns the file); when none answers, the file is rebuilt
here directly. Users and API keys are kept either way. The `replay` command adds this with
`register_rebuild(replay_subparsers)`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path

import duckdb

from computeall.protocol import monitor_api as api

from computeall.protocol.credentials import Credential, CredentialError

from ..cluster_file import add_data_dir_argument, deployment_dir
from ..errors import UserError
from ..identity import add_credential_argument, admin_credential, deployment_security
from .user import ask_monitor

REBUILD_TIMEOUT_S = 3600.0


def register_rebuild(replay_subparsers: argparse._SubParsersAction) -> None:
    parser = replay_subparsers.add_parser("rebuild", help="rebuild the monitor's database from the event log")
    parser.add_argument("--nats", default=None, help="NATS URL (default: $NATS_URL or the running cluster)")
    add_data_dir_argument(parser)
    parser.add_argument("--prefix", default=None)
    parser.add_argument("--json", action="store_true")
    add_credential_argument(parser)
    parser.add_argument("--monitor-credential", default=None,
                        help="the monitor's credential, for a rebuild with no monitor running (default: the data dir's)")
    parser.set_defaults(func=_rebuild)


def _rebuild(args: argparse.Namespace) -> int:
    operator = admin_credential(args)
    try:
        reply = asyncio.run(ask_monitor(operator, args.prefix, api.REBUILD, api.Rebuild(), timeout=REBUILD_TIMEOUT_S))
        where = "by the running monitor"
    except UserError as exc:
        if "no monitor is running" not in str(exc):
            raise
        reply = _offline(_monitor_credential(args, operator), deployment_dir(args.data_dir), args.prefix)
        where = "offline"
    if args.json:
        print(json.dumps({"events": reply.events, "positions": reply.positions, "where": where}))
    else:
        print(f"rebuilt {where}: {reply.events} events, stream positions {reply.positions}")
    return 0


def _monitor_credential(args: argparse.Namespace, operator: Credential) -> Credential:
    """Rebuilding offline is the monitor's work, done as the monitor's identity."""
    try:
        if args.monitor_credential:
            return Credential.load(args.monitor_credential).at(args.nats)
        monitor = deployment_security(args.data_dir).local("monitor", "monitor")
    except CredentialError as exc:
        raise UserError(str(exc)) from None
    if monitor is None:  # a server without authorization: any identity reads the log
        return Credential(role="monitor", name="monitor", servers=operator.servers)
    return monitor.at(args.nats)


def _offline(credential: Credential, directory: Path, prefix: str | None) -> api.MonitorReply:
    # imported here: only this path needs the monitor's code, the usual path is a NATS request
    from computeall.monitor.migrate import SchemaError
    from computeall.monitor.rebuild import rebuild_offline

    try:
        return asyncio.run(rebuild_offline(credential, directory, prefix))
    except duckdb.IOException as exc:
        raise UserError(f"cannot open {directory / 'monitor.duckdb'}: {exc}") from None
    except SchemaError as exc:
        raise UserError(str(exc)) from None
