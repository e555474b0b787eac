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

from computeall.protocol.bus import BusConnectError, process_credential
from computeall.protocol.invites import Invite, InviteError
from computeall.protocol.credentials import Credential, CredentialError
from computeall.protocol.secret_args import JOIN, SecretArgError
from computeall.protocol.sizes import parse_size
from computeall.protocol.subjects import Subjects, check_token

from .member import BusMember
from .options import add_options, share_of_ram


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="computeall pnode", description="Start a PNode: a worker that hosts VNodes.")
    add_options(p)
    return p


def pnode_credential(args: argparse.Namespace, path: str | None = None) -> Credential:
    """The PNode's identity: its invite's or credential's (`path`, else `--credential`) name (a `--name`
    must agree), else `--name`/host-pid. An invite also says how much memory to offer, unless `--memory` does."""
    path = path or args.credential
    try:
        token = JOIN.read(args.join) if args.join or not path else None  # an explicit --join wins
        if token:
            invite = Invite.from_token(token, expect="pnode")
            args.memory = args.memory or invite.memory
            credential = invite.credential().at(args.nats)
        else:
            default = check_token(args.name or f"{socket.gethostname()}-{os.getpid()}".replace(".", "-"), "pnode name")
            url = args.nats or (None if path else "nats://127.0.0.1:4222")
            credential = process_credential(path, url, "pnode", default)
    except (CredentialError, InviteError, SecretArgError, ValueError) as exc:
        raise SystemExit(f"computeall pnode: {exc}") from None
    if args.name and args.name != credential.name:
        raise SystemExit(f"computeall pnode: the credential is PNode {credential.name!r}'s; leave out --name {args.name}")
    return credential


def members(args: argparse.Namespace, credentials: list[Credential], memory: int) -> list[BusMember]:
    """The PNodes this process runs: one real one, or one simulated PNode per credential."""
    subjects = Subjects(args.prefix)
    if args.simulate:
        from .simulated import SimulatedPNode

        return [SimulatedPNode(c, memory, subjects, args.flops, args.full_tensors, args.step_deadline) for c in credentials]
    from computeall.tensorcore.backend import select_device, set_cpu_threads

    from .node import PNode

    set_cpu_threads(max(1, args.processes_on_machine))
    if args.fault:
        logging.getLogger("computeall.pnode").warning("fault injection is on (%s): this PNode misbehaves on purpose",
                                                      args.fault)
    return [PNode(credentials[0], memory, select_device(args.device), subjects, args.step_deadline, fault=args.fault)]


def run(args: argparse.Namespace) -> None:
    faulthandler.enable()  # a crash in native code leaves its Python stack in the log
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if args.credentials and not args.simulate:
        raise SystemExit("computeall pnode: --credentials is for --simulate; a real PNode takes one --credential")
    credentials = [pnode_credential(args, path) for path in (args.credentials if args.simulate else None) or [None]]
    memory = parse_size(args.memory) if args.memory else share_of_ram(args.processes_on_machine)  # an invite may set it
    nodes = members(args, credentials, memory)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, lambda: [node.stop() for node in nodes])
        await asyncio.gather(*(node.run() for node in nodes))

    try:
        asyncio.run(main())
    except BusConnectError as exc:
        raise SystemExit(f"computeall pnode: {exc}") from None
    if refused := [node.refused for node in nodes if node.refused]:
        raise SystemExit(f"computeall pnode: {refused[0]}")


if __name__ == "__main__":
    run(parser().parse_args())
