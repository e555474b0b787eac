"""`python -m computeall.pnode --nats URL [--name N] [--memory 4GiB] [--device auto] [--simulate ...]`.

torch is imported only for a real PNode: `--simulate` runs without it."""

from __future__ import annotations

import argparse
import asyncio
import faulthandler
import logging
import os
import signal
import socket

import psutil

from computeall.protocol.bus import process_credential
from computeall.protocol.credentials import Credential, CredentialError
from computeall.protocol.sizes import parse_size
from computeall.protocol.subjects import Subjects, check_token

from .member import BusMember
from .options import add_options


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="computeall pnode", description="Start a PNode: a worker that hosts VNodes.")
    add_options(p)
    return p


def pnode_credential(args: argparse.Namespace, path: str | None = None) -> Credential:
    """The PNode's identity: its credential's name (a `--name` must agree), else `--name`/host-pid."""
    path = path or args.credential
    try:
        default = check_token(args.name or f"{socket.gethostname()}-{os.getpid()}".replace(".", "-"), "pnode name")
        url = args.nats or (None if path else "nats://127.0.0.1:4222")
        credential = process_credential(path, url, "pnode", default)
    except (CredentialError, ValueError) as exc:
        raise SystemExit(f"computeall pnode: {exc}") from None
    if args.name and args.name != credential.name:
        raise SystemExit(f"computeall pnode: the credential is PNode {credential.name!r}'s; leave out --name {args.name}")
    return credential


def members(args: argparse.Namespace, memory: int) -> list[BusMember]:
    """The PNodes this process runs: one real one, or one simulated PNode per credential."""
    subjects = Subjects(args.prefix)
    if args.simulate:
        from .simulated import SimulatedPNode

        credentials = [pnode_credential(args, path) for path in args.credentials or [None]]
        return [SimulatedPNode(c, memory, subjects, args.flops, args.full_tensors, args.step_deadline) for c in credentials]
    from computeall.tensorcore.backend import select_device, set_cpu_threads

    from .node import PNode

    set_cpu_threads(max(1, args.processes_on_machine))
    return [PNode(pnode_credential(args), memory, select_device(args.device), subjects, args.step_deadline)]


def run(args: argparse.Namespace) -> None:
    faulthandler.enable()  # a crash in native code leaves its Python stack in the log
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if args.credentials and not args.simulate:
        raise SystemExit("computeall pnode: --credentials is for --simulate; a real PNode takes one --credential")
    share = max(1, args.processes_on_machine)
    memory = parse_size(args.memory) if args.memory else psutil.virtual_memory().total // share

    async def main() -> None:
        nodes = members(args, memory)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, lambda: [node.stop() for node in nodes])
        await asyncio.gather(*(node.run() for node in nodes))

    asyncio.run(main())


if __name__ == "__main__":
    run(parser().parse_args())
