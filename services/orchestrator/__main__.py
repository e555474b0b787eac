"""`python -m computeall.orchestrator --nats URL [--credential FILE]`."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal

from computeall.protocol.bus import add_bus_arguments, credential_from_args
from computeall.protocol.bus_failover import BusUnavailable
from computeall.protocol.credentials import CredentialError
from computeall.protocol.fair_share import add_limit_arguments, limits_from_args
from computeall.protocol.subjects import Subjects
from computeall.protocol.telemetry import HEARTBEAT_TIMEOUT_S

from .service import Orchestrator
from .session_storage import GRANTS


def main() -> None:
    p = argparse.ArgumentParser(prog="computeall-orchestrator")
    add_bus_arguments(p)
    p.add_argument("--heartbeat-timeout", type=float, default=HEARTBEAT_TIMEOUT_S, help="seconds of silence before a PNode is lost")
    p.add_argument("--prefix", default=None)
    p.add_argument("--storage-grants", choices=GRANTS, default="authority",
                   help="authority: ask `computeall up` to let each session's PNodes (only) reach its checkpoints; "
                        "every: the server's configuration lets every PNode reach every session's (docker compose)")
    p.add_argument("--standby", action="store_true",
                   help="take over the sessions of orchestrators that die, and take commands only once no active "
                        "orchestrator heartbeats (what a machine that joined a bus runs)")
    p.add_argument("--data-dir", default=None, help="unused: the orchestrator's state is the event log")
    add_limit_arguments(p)
    args = p.parse_args()
    try:
        limits = limits_from_args(args)
    except ValueError as exc:
        raise SystemExit(f"computeall orchestrator: {exc}") from None
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        credential = credential_from_args(args, "orchestrator", "orchestrator")
    except CredentialError as exc:
        raise SystemExit(f"computeall orchestrator: {exc}") from None
    orchestrator = Orchestrator(credential, Subjects(args.prefix), args.heartbeat_timeout, limits, args.storage_grants,
                                args.standby)

    async def run() -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, orchestrator.stop)
        await orchestrator.run()

    try:
        asyncio.run(run())
    except BusUnavailable as exc:  # a start-up fold is complete or the orchestrator does not start
        raise SystemExit(f"computeall orchestrator: {exc}; not started (`up` starts it again)") from None


if __name__ == "__main__":
    main()
